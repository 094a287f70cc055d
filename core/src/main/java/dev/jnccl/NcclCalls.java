package dev.jnccl;

import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.internal.Native;
import java.lang.foreign.MemorySegment;

/**
 * Where this package turns native results into its exceptions: a failed load becomes
 * {@link NativeLibraryException}, a failed NCCL call {@link NcclException} with NCCL's texts.
 * ({@code dev.jnccl.cuda} does the same for CUDA calls, with {@code CudaException}.)
 */
final class NcclCalls {
    private static final int NCCL_SUCCESS = 0;
    /** ncclInProgress (7 since NCCL 2.14; the generated constant is not read so that no binding class loads early). */
    private static final int NCCL_IN_PROGRESS = 7;

    private NcclCalls() {}

    /** The loaded native libraries; a load failure becomes a {@link NativeLibraryException}. */
    static LoadedLibraries libraries() {
        return Native.libraries(NativeLibraryException::new);
    }

    /**
     * The one rule for NCCL results: {@code ncclSuccess} and {@code ncclInProgress} pass (the latter
     * means a non-blocking communicator accepted the call; its completion is polled separately),
     * anything else throws {@link NcclException} with NCCL's texts.
     */
    static void checkNccl(int result, String function, MemorySegment comm, int rank, int device) {
        if (result != NCCL_SUCCESS && result != NCCL_IN_PROGRESS) {
            throw ncclFailure(result, function, comm, rank, device);
        }
    }

    /**
     * The exception for a failed NCCL call, with NCCL's texts.
     *
     * @param result the ncclResult_t value
     * @param function the NCCL function called
     * @param comm the communicator of the call, for ncclGetLastError (may be null)
     * @param rank the rank of the communicator, -1 when none
     * @param device the device of the communicator, -1 when unknown
     * @return the exception, to be thrown by the caller
     */
    static NcclException ncclFailure(int result, String function, MemorySegment comm, int rank, int device) {
        return new NcclException(function, result, Native.ncclErrorText(result), Native.ncclLastError(comm), rank,
                device);
    }
}
