package dev.jnccl;

import java.util.List;

/**
 * The communicator was aborted because some of its ranks were lost (a rank's thread failed or was
 * interrupted, its process died, its launcher gave it up): what every call on a communicator throws
 * once its launcher has said so (see {@link dev.jnccl.spi.Failures#lostRanks()}). The survivors go
 * on without the lost ranks with {@link #recover()}.
 *
 * <pre>{@code
 * try {
 *     comm.allReduce(gradients, ReduceOp.SUM, stream);
 * } catch (RankLostException e) {
 *     comm = e.recover(); // the survivors' communicator, ranks renumbered in the order of their old ranks
 * }
 * }</pre>
 */
public final class RankLostException extends CommunicatorAbortedException {
    private static final long serialVersionUID = 1L;

    /** The communicator the exception was thrown on: not serialized (a deserialized one cannot recover). */
    private final transient Communicator communicator;
    /** The ranks lost, ranks of the communicator the exception was thrown on, sorted. */
    private final List<Integer> lostRanks;

    RankLostException(String message, Throwable cause, Diagnosis diagnosis, Communicator communicator,
                      List<Integer> lostRanks) {
        super(message, cause, diagnosis);
        this.communicator = communicator;
        this.lostRanks = List.copyOf(lostRanks);
    }

    /** {@return the lost ranks, in the numbering of the communicator this was thrown on, sorted} */
    public List<Integer> lostRanks() {
        return lostRanks;
    }

    /**
     * The survivors' communicator: {@code communicator.shrink(lostRanks)} (see
     * {@link Communicator#shrink}), collective among the survivors. Where the launcher replaces lost
     * ranks (threads mode with {@code ThreadsOptions.withReplacementDevices}), the survivors'
     * communicator is then grown back by the replacements ({@link Communicator#grow}: the survivors
     * first, in the order of their old ranks, the replacements last), and that grown communicator is
     * returned. Idempotent per communicator: a second call (from this or another exception of the
     * same communicator) returns the same communicator.
     *
     * @return the survivors' communicator
     * @throws IllegalStateException when this exception was deserialized (it has no communicator),
     *         or as {@link Communicator#shrink}
     */
    public Communicator recover() {
        if (communicator == null) {
            throw new IllegalStateException("recover: this RankLostException was deserialized and has no communicator"
                    + " (lost ranks " + lostRanks + ")");
        }
        return Grows.recover(communicator, lostRanks);
    }
}
