package dev.jnccl.bindings;

/**
 * The native libraries could not be loaded or are unusable (missing, too old, native access
 * denied). The message is meant for the user: it lists what was tried and what to do.
 */
public final class NativeLoadException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /**
     * A failure to load or check a native library.
     *
     * @param message what failed, with every place tried
     */
    public NativeLoadException(String message) {
        super(message);
    }

    /**
     * A failure to load or check a native library, caused by {@code cause}.
     *
     * @param message what failed, with every place tried
     * @param cause the underlying error
     */
    public NativeLoadException(String message, Throwable cause) {
        super(message, cause);
    }
}
