package dev.jnccl;

import java.io.Serializable;
import java.util.List;
import java.util.Locale;
import java.util.Objects;

/**
 * What one rank of a communicator was doing when a hang or a failure was diagnosed: a snapshot,
 * taken without waiting for the rank (a stuck rank is described as it is). Part of a
 * {@link Diagnosis}; the verdict is made from the summaries of every rank.
 *
 * <p>Transactions are counted as each rank executes them: transaction #n is the n-th transaction
 * (or graph replay) the rank executed, the same count on every rank that runs the same steps (it is
 * the flight recorder's number unless a transaction was closed without executing or captured into
 * a CUDA graph).
 *
 * @param rank      the rank
 * @param worldSize the number of ranks of its communicator
 * @param status    whether its communicator is open, closing, closed or aborted, or no summary came
 * @param detail    why it was aborted, closed or gave no summary; empty when open
 * @param executed  how many transactions it has executed (one whose enqueue has started counts)
 * @param completed how many transactions are known complete on the GPU (the watchdog probes
 *                  completion every interval, so this may lag behind; 0 without the watchdog)
 * @param pending   the transactions executed and not known complete, oldest first
 * @param activity  what its thread was doing
 * @param call      the call it was in ({@code "synchronize"}, {@code "barrier"}, ...), empty in user code
 * @param thread    the name of its thread, empty when unknown
 * @param location  the innermost frame of its thread that is neither jnccl's nor the JDK's (for
 *                  example {@code "Trainer.step(Trainer.java:88)"}), empty when none
 * @param stack     the top frames of its thread's stack, innermost first
 */
public record RankSummary(int rank, int worldSize, Status status, String detail, long executed, long completed,
                          List<Pending> pending, Activity activity, String call, String thread, String location,
                          List<String> stack) implements Serializable {

    /** Where a rank's communicator is in its life. */
    public enum Status {
        /** Open: it may still execute transactions. */
        OPEN,
        /** Its close has begun, or its launcher ended its work: it executes no more transactions. */
        CLOSING,
        /** Closed. */
        CLOSED,
        /** Aborted ({@link RankSummary#detail()} says why). */
        ABORTED,
        /** The rank gave no summary ({@link RankSummary#detail()} says why: its process is gone, it has no communicator). */
        ABSENT
    }

    /** What a rank's thread was doing. */
    public enum Activity {
        /** Outside jnccl, in the user's code. */
        USER_CODE,
        /** Executing a transaction or a graph replay: enqueuing its commands (into NCCL or the transport). */
        ENQUEUE,
        /** Waiting for its communication in {@code await} or {@code synchronize}. */
        WAIT,
        /** In a host-side call that waits for the other ranks (barrier, host gathers, split, the launcher's pace). */
        HOST_CALL,
        /** Closing its communicator. */
        CLOSE,
        /** Its thread has ended. */
        ENDED,
        /** Unknown (no summary, or no thread known). */
        UNKNOWN
    }

    /**
     * A transaction executed and not known complete.
     *
     * @param transaction its number, counted as the rank executed (see {@link RankSummary})
     * @param commands    its commands, as the flight recorder describes them
     *                    ({@code "allReduce SUM FP32 4096 elements (16384 bytes)"})
     */
    public record Pending(long transaction, List<String> commands) implements Serializable {
        /** Copies the commands; none is null. */
        public Pending {
            commands = List.copyOf(commands);
        }
    }

    /** Pending transactions {@link #describe()} lists one by one. */
    private static final int SHOWN = 8;

    /** Checks the values and copies the lists. */
    public RankSummary {
        Objects.requireNonNull(status, "RankSummary: status is null");
        Objects.requireNonNull(detail, "RankSummary: detail is null");
        Objects.requireNonNull(activity, "RankSummary: activity is null");
        Objects.requireNonNull(call, "RankSummary: call is null");
        Objects.requireNonNull(thread, "RankSummary: thread is null");
        Objects.requireNonNull(location, "RankSummary: location is null");
        if (rank < 0 || rank >= worldSize) {
            throw new IllegalArgumentException("RankSummary: rank " + rank + " is outside [0, " + worldSize + ")");
        }
        pending = List.copyOf(pending);
        stack = List.copyOf(stack);
    }

    /** {@return a few lines for logs: status, counts, activity, pending transactions and the top frames} */
    public String describe() {
        StringBuilder sb = new StringBuilder("rank ").append(rank).append(" of ").append(worldSize).append(": ");
        if (status == Status.ABSENT) {
            return sb.append("no summary (").append(detail).append(')').toString();
        }
        sb.append(status.name().toLowerCase(Locale.ROOT));
        if (!detail.isEmpty()) {
            sb.append(" (").append(firstLine(detail)).append(')');
        }
        sb.append(", executed ").append(executed).append(", completed ").append(completed).append(", ")
                .append(Verdict.doing(this));
        if (!thread.isEmpty()) {
            sb.append(", thread ").append(thread);
        }
        for (Pending p : pending.subList(0, Math.min(pending.size(), SHOWN))) {
            sb.append("\n    pending #").append(p.transaction()).append(": ").append(String.join("; ", p.commands()));
        }
        if (pending.size() > SHOWN) {
            sb.append("\n    and ").append(pending.size() - SHOWN).append(" more pending, the newest #")
                    .append(pending.getLast().transaction());
        }
        for (String frame : stack) {
            sb.append("\n    at ").append(frame);
        }
        return sb.toString();
    }

    static String firstLine(String text) {
        int end = text.indexOf('\n');
        return end < 0 ? text : text.substring(0, end);
    }
}
