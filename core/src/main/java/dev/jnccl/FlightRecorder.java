package dev.jnccl;

import dev.jnccl.spi.Command;
import dev.jnccl.cuda.CudaEvent;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;

/**
 * The last N executed transactions of one communicator, for hang diagnosis: sequence number,
 * commands (sizes, peers), age and, when the watchdog tracks it, whether the GPU finished it.
 * Thread-safe: the owner thread adds, the watchdog polls and dumps.
 */
final class FlightRecorder {

    /** One executed transaction. {@code done} is tracked only when {@code completion} is set. */
    static final class Entry {
        final long sequence;
        final List<Command> commands;
        final long executedNanos;
        CudaEvent completion;
        volatile long completedNanos;

        Entry(long sequence, List<Command> commands, long executedNanos, CudaEvent completion) {
            this.sequence = sequence;
            this.commands = commands;
            this.executedNanos = executedNanos;
            this.completion = completion;
        }

        /**
         * The transaction's sequence number on its communicator.
         *
         * @return the sequence number
         */
        long sequence() {
            return sequence;
        }

        /**
         * The time since the transaction was executed.
         *
         * @param now the current {@link System#nanoTime()}
         * @return nanoseconds since the execute
         */
        long ageNanos(long now) {
            return now - executedNanos;
        }

        /**
         * Whether the transaction is known to be complete.
         *
         * @return whether its completion event fired (false when not tracked)
         */
        boolean isCompleted() {
            return completedNanos != 0;
        }

        String describe(long now) {
            StringBuilder sb = new StringBuilder("#").append(sequence).append(" age ")
                    .append(Duration.ofNanos(now - executedNanos).toMillis()).append(" ms, ");
            if (completion == null && completedNanos == 0) {
                sb.append("completion not tracked");
            } else if (completedNanos != 0) {
                sb.append("completed after ").append((completedNanos - executedNanos) / 1000).append(" us");
            } else {
                sb.append("NOT COMPLETED");
            }
            sb.append(", ").append(commands.size()).append(" command(s)");
            for (Command command : commands) {
                sb.append("\n      ").append(describe(command));
            }
            return sb.toString();
        }

        private static String describe(Command command) {
            return switch (command) {
                case Command.AllGather g -> "allGather " + g.shard().dtype() + " shard " + g.shard().count()
                        + " elements -> full " + g.full().count() + " (" + g.bytes() + " bytes)";
                case Command.ReduceScatter s -> "reduceScatter " + s.op() + " " + s.tensor().dtype() + " "
                        + s.tensor().count() + " elements (" + s.bytes() + " bytes)";
                case Command.Send s -> "send " + s.tensor().dtype() + " " + s.tensor().count() + " elements ("
                        + s.bytes() + " bytes) to rank " + s.peer();
                case Command.Recv r -> "recv " + r.tensor().dtype() + " " + r.tensor().count() + " elements ("
                        + r.bytes() + " bytes) from rank " + r.peer();
                case Command.DestructiveAllToAll a -> "destructiveAllToAll " + a.tensor().dtype() + " "
                        + a.tensor().count() + " elements (" + a.bytes() + " bytes)";
                case Command.AllToAll a -> "allToAll " + a.send().dtype() + " " + a.send().count() + " elements ("
                        + a.bytes() + " bytes)";
                case Command.Broadcast b -> "broadcast " + b.tensor().dtype() + " " + b.tensor().count()
                        + " elements (" + b.bytes() + " bytes) from rank " + b.root();
                case Command.AllReduce a -> "allReduce " + a.op() + " " + a.tensor().dtype() + " "
                        + a.tensor().count() + " elements (" + a.bytes() + " bytes)";
            };
        }
    }

    private final int capacity;
    private final ArrayDeque<Entry> entries;
    private final ArrayDeque<CudaEvent> freeEvents = new ArrayDeque<>();

    /**
     * A recorder of the last {@code capacity} transactions.
     *
     * @param capacity how many transactions it keeps (at least 1)
     */
    FlightRecorder(int capacity) {
        this.capacity = capacity;
        this.entries = new ArrayDeque<>(capacity);
    }

    /**
     * Adds an executed transaction; {@code commands} must be immutable; {@code completion} (nullable)
     * was recorded after it on the comms stream.
     *
     * @param sequence the transaction's number
     * @param commands the executed commands
     * @param completion the completion event, or null
     */
    synchronized void add(long sequence, List<Command> commands, CudaEvent completion) {
        if (entries.size() == capacity) {
            Entry dropped = entries.removeFirst();
            if (dropped.completion != null) {
                // Still pending when pushed out: keep tracking is pointless, but the event must not
                // be reused while the GPU may still record it; leak-free because close() frees it.
                retired.add(dropped.completion);
                dropped.completion = null;
            }
        }
        entries.addLast(new Entry(sequence, commands, System.nanoTime(), completion));
    }

    private final List<CudaEvent> retired = new ArrayList<>();

    /**
     * An event for tracking completion, reused from completed entries (created by the caller when null).
     *
     * @return a free event, or null
     */
    synchronized CudaEvent takeFreeEvent() {
        return freeEvents.pollFirst();
    }

    /**
     * Marks entries whose completion event fired; returns the oldest entry still pending, or null.
     * Called by the watchdog only.
     *
     * @return the oldest pending entry, or null
     */
    synchronized Entry pollOldestPending() {
        Entry oldest = null;
        long now = System.nanoTime();
        for (Entry entry : entries) {
            if (entry.completion != null && entry.completedNanos == 0) {
                if (entry.completion.isComplete()) {
                    entry.completedNanos = now;
                    freeEvents.addLast(entry.completion);
                    entry.completion = null;
                } else if (oldest == null) {
                    oldest = entry;
                }
            }
        }
        return oldest;
    }

    /** {@return a multi-line dump of the recorded transactions, oldest first} */
    synchronized String dump() {
        long now = System.nanoTime();
        StringBuilder sb = new StringBuilder();
        sb.append("last ").append(entries.size()).append(" transaction(s), oldest first:");
        for (Entry entry : entries) {
            sb.append("\n    ").append(entry.describe(now));
        }
        return sb.toString();
    }

    /** Destroys every event this recorder holds. Call only when the comms stream is done or aborted. */
    synchronized void closeEvents() {
        for (Entry entry : entries) {
            if (entry.completion != null) {
                closeQuietly(entry.completion);
                entry.completion = null;
            }
        }
        freeEvents.forEach(FlightRecorder::closeQuietly);
        freeEvents.clear();
        retired.forEach(FlightRecorder::closeQuietly);
        retired.clear();
    }

    private static void closeQuietly(CudaEvent event) {
        try {
            event.close();
        } catch (RuntimeException e) {
            // Best effort during teardown; the communicator logs its own failures.
        }
    }
}
