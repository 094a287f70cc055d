package dev.jnccl;

import java.util.Optional;

/**
 * The communicator was aborted (by {@link Communicator#abort}, by the watchdog after an NCCL error
 * or a timeout, or after a failure that left it unusable). Every later use of it, and every thread
 * waiting on it, gets this exception; the message says why it was aborted. When the ranks diagnosed
 * the abort (see {@link Diagnosis}), the message's first line is the verdict and
 * {@link #diagnosis()} gives the whole diagnosis.
 */
public class CommunicatorAbortedException extends JncclException {
    private static final long serialVersionUID = 1L;

    /** The diagnosis of the abort, or null. */
    private final Diagnosis diagnosis;

    /**
     * An abort, explained by {@code message}.
     *
     * @param message what was aborted and why
     */
    public CommunicatorAbortedException(String message) {
        super(message);
        this.diagnosis = null;
    }

    /**
     * An abort caused by {@code cause}.
     *
     * @param message what was aborted and why
     * @param cause the failure that led to the abort
     */
    public CommunicatorAbortedException(String message, Throwable cause) {
        super(message, cause);
        this.diagnosis = null;
    }

    /**
     * A diagnosed abort.
     *
     * @param message   what was aborted and why (its first line is the verdict when {@code diagnosis} is given)
     * @param cause     the failure that led to the abort, or null
     * @param diagnosis the diagnosis of the abort, or null
     */
    public CommunicatorAbortedException(String message, Throwable cause, Diagnosis diagnosis) {
        super(message, cause);
        this.diagnosis = diagnosis;
    }

    /** {@return the diagnosis of the abort: the verdict and every rank's summary, empty when none was made} */
    public Optional<Diagnosis> diagnosis() {
        return Optional.ofNullable(diagnosis);
    }
}
