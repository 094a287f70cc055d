package dev.jnccl.cuda;

import dev.jnccl.NativeLibraryException;
import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.internal.Native;

/**
 * Where this package turns native results into exceptions: a failed load becomes the API's
 * {@link NativeLibraryException}, a failed CUDA call {@link CudaException} with CUDA's text.
 */
final class CudaCalls {
    private CudaCalls() {}

    /** The loaded native libraries; a load failure becomes a {@link NativeLibraryException}. */
    static LoadedLibraries libraries() {
        return Native.libraries(NativeLibraryException::new);
    }

    /** Throws {@link CudaException} for a failed CUDA call made outside any communicator. */
    static void check(int code, String function, int device) {
        if (code != 0) {
            throw new CudaException(function, code, Native.cudaErrorText(code), -1, device);
        }
    }
}
