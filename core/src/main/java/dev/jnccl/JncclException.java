package dev.jnccl;

/** Base of jnccl's unchecked exceptions that come from the native layer or a communicator's state. */
public class JncclException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public JncclException(String message) {
        super(message);
    }

    public JncclException(String message, Throwable cause) {
        super(message, cause);
    }
}
