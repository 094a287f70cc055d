package dev.jnccl;

/**
 * NCCL or the CUDA runtime could not be loaded, is too old, or native access is not enabled. The
 * message lists every place tried with the loader's error and says what to do.
 */
public final class NativeLibraryException extends JncclException {
    private static final long serialVersionUID = 1L;

    /**
     * A failure to load or check the native libraries.
     *
     * @param message what failed, with every place tried
     * @param cause the underlying failure
     */
    public NativeLibraryException(String message, Throwable cause) {
        super(message, cause);
    }
}
