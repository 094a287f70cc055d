package dev.jnccl.bindings;

/**
 * The native libraries could not be loaded or are unusable (missing, too old, native access
 * denied). The message is meant for the user: it lists what was tried and what to do. Core hands
 * it on as the API's {@code dev.jnccl.NativeLibraryException} with the same message; it has the
 * same name because it is the same failure, raised in the layer that cannot see the API.
 */
public final class NativeLibraryException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /**
     * A failure to load or check a native library.
     *
     * @param message what failed, with every place tried
     */
    public NativeLibraryException(String message) {
        super(message);
    }

    /**
     * A failure to load or check a native library, caused by {@code cause}.
     *
     * @param message what failed, with every place tried
     * @param cause the underlying error
     */
    public NativeLibraryException(String message, Throwable cause) {
        super(message, cause);
    }
}
