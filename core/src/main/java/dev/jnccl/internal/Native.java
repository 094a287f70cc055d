package dev.jnccl.internal;

import static java.lang.foreign.ValueLayout.JAVA_INT;

import dev.jnccl.NativeLibraryException;
import dev.jnccl.NcclException;
import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NativeLibraries;
import dev.jnccl.bindings.NativeLoadException;
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
    private static volatile LoadedLibraries libraries;

    private Native() {}

    /**
     * Loads the native libraries once (see {@link NativeLibraries}); later calls are a volatile read.
     *
     * @return the loaded libraries
     */
    public static LoadedLibraries libraries() {
        LoadedLibraries loaded = libraries;
        if (loaded == null) {
            try {
                loaded = NativeLibraries.load();
            } catch (NativeLoadException e) {
                throw new NativeLibraryException(e.getMessage(), e);
            }
            libraries = loaded;
        }
        return loaded;
    }

    /**
     * Throws {@link dev.jnccl.cuda.CudaException} unless {@code code} is cudaSuccess.
     *
     * @param code the cudaError_t value
     * @param function the CUDA runtime function called
     * @param device the device of the call
     * @param rank the rank of the calling communicator, -1 when none
     */
    public static void checkCuda(int code, String function, int device, int rank) {
        if (code != 0) {
            throw new CudaException(function, code, cudaErrorText(code), device, rank);
        }
    }

    /**
     * Throws {@link dev.jnccl.NcclException} unless {@code result} is ncclSuccess or ncclInProgress.
     *
     * @param result the ncclResult_t value
     * @param function the NCCL function called
     * @param comm the communicator of the call, for ncclGetLastError (may be null)
     * @param rank the rank of the communicator, -1 when none
     * @param device the device of the communicator, -1 when unknown
     */
    public static void checkNccl(int result, String function, MemorySegment comm, int rank, int device) {
        if (result != 0) {
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
            checkCuda(CudaRuntime.cudaGetDevice(device), "cudaGetDevice", -1, -1);
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
