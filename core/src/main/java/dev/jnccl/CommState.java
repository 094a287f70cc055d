package dev.jnccl;

/**
 * The state machine of one {@link Communicator}: open, revoked, aborted or closed, with the
 * abort's reason and diagnosis. Every transition is made under one monitor (which the split
 * bookkeeping shares, so that no child is added once the parent stopped being open); the hot path
 * reads the state without it.
 */
final class CommState {
    /** REVOKED: NCCL's work was revoked ({@link Communicator#revoke}); only shrink, abort and close remain. */
    enum State { OPEN, REVOKED, ABORTED, CLOSED }

    private final Object monitor = new Object();
    private volatile State state = State.OPEN;
    private volatile String reason;
    /** The diagnosis the abort was made with, or null. */
    private volatile Diagnosis diagnosis;

    /** {@return the monitor of every transition (see the class comment)} */
    Object monitor() {
        return monitor;
    }

    State get() {
        return state;
    }

    boolean isOpen() {
        return state == State.OPEN;
    }

    /** {@return why it was aborted or revoked (later events appended), or null} */
    String reason() {
        return reason;
    }

    /** {@return the diagnosis the abort was made with, or null} */
    Diagnosis diagnosis() {
        return diagnosis;
    }

    /** Open to revoked; {@return false when it was not open (revoked already, or further)} */
    boolean revoke(String why) {
        synchronized (monitor) {
            if (state != State.OPEN) {
                return false;
            }
            reason = why;
            state = State.REVOKED;
            return true;
        }
    }

    /** Open or revoked to aborted with {@code why}; {@return false when it was aborted or closed already} */
    boolean abort(String why, Diagnosis made) {
        synchronized (monitor) {
            if (state == State.ABORTED || state == State.CLOSED) {
                return false;
            }
            reason = why;
            diagnosis = made;
            state = State.ABORTED;
            return true;
        }
    }

    /**
     * To aborted for a shrink: {@code why} after an earlier abort's reason, without a diagnosis of its
     * own; {@return false when it was closed}
     */
    boolean retire(String why) {
        synchronized (monitor) {
            if (state == State.CLOSED) {
                return false;
            }
            reason = state == State.ABORTED ? reason + "; then " + why : why;
            state = State.ABORTED;
            return true;
        }
    }

    /** NCCL's abort was abandoned ({@code what}): every later report says so after the reason. */
    void abandoned(String what) {
        synchronized (monitor) {
            reason = reason + "; then " + what;
        }
    }

    void close() {
        synchronized (monitor) {
            state = State.CLOSED;
        }
    }
}
