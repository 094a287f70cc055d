package dev.jnccl;

/**
 * NCCL or the CUDA runtime could not be loaded, is too old, or native access is not enabled. The
 * message lists every place tried with the loader's error and says what to do.
 */
public final class NativeLibraryException extends JncclException {
    private static final long serialVersionUID = 1L;

    public NativeLibraryException(String message, Throwable cause) {
        super(message, cause);
    }
}
