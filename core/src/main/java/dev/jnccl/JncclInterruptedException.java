package dev.jnccl;

/**
 * A blocking jnccl call ended because its thread was interrupted. The thread's interrupt status
 * stays set, and the cause is an {@link InterruptedException}. What was enqueued on the GPU before
 * the wait (copies, collectives) was not cancelled: it may still run, so memory it uses must stay
 * allocated until a later wait sees it done, or the communicator is aborted.
 */
public class JncclInterruptedException extends JncclException {
    private static final long serialVersionUID = 1L;

    /**
     * An interrupted wait.
     *
     * @param message which wait ended, and that the enqueued work was not cancelled
     * @param cause   the interrupt, as an {@link InterruptedException}
     */
    public JncclInterruptedException(String message, InterruptedException cause) {
        super(message, cause);
    }
}
