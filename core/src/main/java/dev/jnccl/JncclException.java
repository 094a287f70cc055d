package dev.jnccl;

/** Base of jnccl's unchecked exceptions that come from the native layer or a communicator's state. */
public class JncclException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /**
     * A failure explained by {@code message}.
     *
     * @param message what failed
     */
    public JncclException(String message) {
        super(message);
    }

    /**
     * A failure caused by {@code cause}.
     *
     * @param message what failed
     * @param cause the underlying failure
     */
    public JncclException(String message, Throwable cause) {
        super(message, cause);
    }
}
