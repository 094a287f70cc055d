package dev.jnccl;

/**
 * The communicator was aborted (by {@link Communicator#abort}, by the watchdog after an NCCL error
 * or a timeout, or after a failure that left it unusable). Every later use of it, and every thread
 * waiting on it, gets this exception; the message says why it was aborted.
 */
public final class CommunicatorAbortedException extends JncclException {
    private static final long serialVersionUID = 1L;

    /**
     * An abort, explained by {@code message}.
     *
     * @param message what was aborted and why
     */
    public CommunicatorAbortedException(String message) {
        super(message);
    }

    /**
     * An abort caused by {@code cause}.
     *
     * @param message what was aborted and why
     * @param cause the failure that led to the abort
     */
    public CommunicatorAbortedException(String message, Throwable cause) {
        super(message, cause);
    }
}
