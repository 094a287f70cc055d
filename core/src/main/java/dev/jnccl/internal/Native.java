package dev.jnccl.internal;

import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NativeLibraries;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import java.lang.foreign.MemorySegment;
import java.util.function.BiFunction;

/**
 * The native plumbing every package of core shares: loading the libraries before the first
 * generated binding class is touched, and the texts CUDA and NCCL give for a result. It works on
 * raw result codes and handles only; turning a result into an exception is the job of the package
 * that owns the exception type ({@code dev.jnccl} for NCCL, {@code dev.jnccl.cuda} for CUDA), so
 * this package needs nothing above it. Not API.
 */
public final class Native {
    private Native() {}

    /**
     * The loaded native libraries: {@link NativeLibraries#load()} loads them once per JVM and caches
     * the result (this class keeps no second copy).
     *
     * @param failure makes the caller's exception from the loader's message and its exception
     *                (the API's {@code NativeLibraryException::new})
     * @return the loaded libraries
     */
    public static LoadedLibraries libraries(BiFunction<String, Throwable, ? extends RuntimeException> failure) {
        try {
            return NativeLibraries.load();
        } catch (dev.jnccl.bindings.NativeLibraryException e) { // the same failure, handed on as the caller's type
            throw failure.apply(e.getMessage(), e);
        }
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
