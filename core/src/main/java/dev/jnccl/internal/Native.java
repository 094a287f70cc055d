package dev.jnccl.internal;

import static java.lang.foreign.ValueLayout.JAVA_INT;

import dev.jnccl.NativeLibraryException;
import dev.jnccl.NcclException;
import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NativeLibraries;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.cuda.CudaException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * The one place where core turns native results into exceptions, and where it makes sure the
 * libraries are loaded before the first generated binding class is touched. Not API.
 */
public final class Native {
    private static final int NCCL_SUCCESS = 0;
    /** ncclInProgress (7 since NCCL 2.14; the generated constant is not read so that no binding class loads early). */
    private static final int NCCL_IN_PROGRESS = 7;

    private Native() {}

    /**
     * The loaded native libraries: {@link NativeLibraries#load()} loads them once per JVM and caches
     * the result (this class keeps no second copy); a load failure becomes a {@link NativeLibraryException}.
     */
    public static LoadedLibraries libraries() {
        try {
            return NativeLibraries.load();
        } catch (dev.jnccl.bindings.NativeLibraryException e) { // the same failure, handed on as the API's type
            throw new NativeLibraryException(e.getMessage(), e);
        }
    }

    /** Throws {@link CudaException} for a failed CUDA call made outside any communicator. */
    public static void checkCuda(int code, String function, int device) {
        if (code != 0) {
            throw new CudaException(function, code, cudaErrorText(code), -1, device);
        }
    }

    /** Throws {@link CudaException} for a failed CUDA call made for the communicator of {@code rank}. */
    public static void checkCudaOnRank(int code, String function, int rank, int device) {
        if (code != 0) {
            throw new CudaException(function, code, cudaErrorText(code), rank, device);
        }
    }

    /**
     * The one rule for NCCL results: {@code ncclSuccess} and {@code ncclInProgress} pass (the latter
     * means a non-blocking communicator accepted the call; its completion is polled separately),
     * anything else throws {@link NcclException} with NCCL's texts.
     */
    public static void checkNccl(int result, String function, MemorySegment comm, int rank, int device) {
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
    public static NcclException ncclFailure(int result, String function, MemorySegment comm, int rank, int device) {
        return new NcclException(function, result, ncclErrorText(result), ncclLastError(comm), rank, device);
    }

    /**
     * The text of a cudaError_t.
     *
     * @param code the cudaError_t value
     * @return cudaGetErrorString of {@code code}
     */
    public static String cudaErrorText(int code) {
        return string(CudaRuntime.cudaGetErrorString(code));
    }

    /**
     * The text of an ncclResult_t.
     *
     * @param result the ncclResult_t value
     * @return ncclGetErrorString of {@code result}
     */
    public static String ncclErrorText(int result) {
        return string(Nccl.ncclGetErrorString(result));
    }

    /**
     * NCCL's last error text.
     *
     * @param comm the communicator (may be null)
     * @return ncclGetLastError, empty when none
     */
    public static String ncclLastError(MemorySegment comm) {
        return string(Nccl.ncclGetLastError(comm == null ? MemorySegment.NULL : comm));
    }

    /** {@return the calling thread's current CUDA device} */
    public static int currentDevice() {
        libraries();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment device = arena.allocate(JAVA_INT);
            checkCuda(CudaRuntime.cudaGetDevice(device), "cudaGetDevice", -1);
            return device.get(JAVA_INT, 0);
        }
    }

    /**
     * A C string returned by a native call (a zero-length segment) as a Java string.
     *
     * @param cString the returned pointer
     * @return the string
     */
    public static String string(MemorySegment cString) {
        if (cString == null || cString.equals(MemorySegment.NULL)) {
            return "";
        }
        return cString.reinterpret(Integer.MAX_VALUE).getString(0);
    }
}
