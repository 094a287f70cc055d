package dev.jnccl;

import dev.jnccl.spi.Command;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.List;

/**
 * The last N executed transactions of one communicator, for hang diagnosis: sequence number,
 * commands (sizes, peers), age and, when the watchdog tracks completion, whether the GPU finished it.
 * Thread-safe: the owner thread adds, the watchdog probes, polls and dumps.
 *
 * <p>Completion is tracked by probes, not by an event per transaction: the watchdog records one
 * event on the comms stream each interval when transactions were executed since its last probe
 * ({@link #probe}); the stream runs in order, so a completed probe means every transaction before
 * it is done, and a probe still pending after the timeout names the oldest transaction before it
 * that is not. The executing thread then pays for no CUDA call at all (an event record per
 * transaction cost about as much as the rest of jnccl's own work).
 */
final class FlightRecorder {

    /** One executed transaction; {@code completedNanos} is set once a probe after it has completed. */
    static final class Entry {
        final long sequence;
        final List<Command> commands;
        final long executedNanos;
        /** The graph this transaction was captured into (it never runs itself), or 0. */
        final long capturedInto;
        /** The graph this entry is a replay of ({@code Communicator.launch}), or 0. */
        final long replayOf;
        volatile long completedNanos;

        Entry(long sequence, List<Command> commands, long executedNanos) {
            this(sequence, commands, executedNanos, 0, 0);
        }

        Entry(long sequence, List<Command> commands, long executedNanos, long capturedInto, long replayOf) {
            this.sequence = sequence;
            this.commands = commands;
            this.executedNanos = executedNanos;
            this.capturedInto = capturedInto;
            this.replayOf = replayOf;
        }

        /** {@return whether the entry is a transaction captured into a graph: it never completes itself} */
        boolean isCaptured() {
            return capturedInto != 0;
        }

        /** {@return how the entry is named in messages: "transaction #n" or "replay #n of graph #g"} */
        String name() {
            return replayOf != 0 ? "replay #" + sequence + " of graph #" + replayOf : "transaction #" + sequence;
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
         * @return whether a probe recorded after it has completed
         */
        boolean isCompleted() {
            return completedNanos != 0;
        }

        String describe(long now, boolean tracked, boolean probed) {
            StringBuilder sb = new StringBuilder("#").append(sequence).append(" age ")
                    .append(Duration.ofNanos(now - executedNanos).toMillis()).append(" ms, ");
            if (replayOf != 0) {
                sb.append("replay of graph #").append(replayOf).append(", ");
            }
            if (capturedInto != 0) {
                sb.append("captured into graph #").append(capturedInto).append(" (runs only in its replays)");
            } else if (completedNanos != 0) {
                sb.append("completed within ").append((completedNanos - executedNanos) / 1000).append(" us");
            } else if (!tracked) {
                sb.append("completion not tracked");
            } else if (probed) {
                sb.append("NOT COMPLETED");
            } else {
                sb.append("completion not checked yet");
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
                case Command.AllReduceOutOfPlace a -> "allReduce " + a.op() + " " + a.src().dtype() + " "
                        + a.src().count() + " elements (" + a.bytes() + " bytes), out of place";
                case Command.ReduceScatterOutOfPlace s -> "reduceScatter " + s.op() + " " + s.src().dtype() + " "
                        + s.src().count() + " elements -> shard " + s.dst().count() + " (" + s.bytes()
                        + " bytes), out of place";
                case Command.BroadcastOutOfPlace b -> "broadcast " + b.dst().dtype() + " " + b.dst().count()
                        + " elements (" + b.bytes() + " bytes) from rank " + b.root() + ", out of place";
                case Command.Reduce r -> "reduce " + r.op() + " " + r.src().dtype() + " " + r.src().count()
                        + " elements (" + r.bytes() + " bytes) to rank " + r.root();
                case Command.Gather g -> "gather " + g.src().dtype() + " " + g.src().count() + " elements ("
                        + g.bytes() + " bytes) to rank " + g.root();
                case Command.Scatter s -> "scatter " + s.dst().dtype() + " " + s.dst().count() + " elements ("
                        + s.bytes() + " bytes) from rank " + s.root();
                case Command.UnevenAllToAll a -> "allToAll (uneven) " + a.send().dtype() + " sendCounts "
                        + Arrays.toString(a.sendCounts()) + " recvCounts " + Arrays.toString(a.recvCounts()) + " ("
                        + a.bytes() + " bytes)";
            };
        }
    }

    /** A probe: an event recorded on the comms stream after transaction {@code covers}. */
    private record Probe(CudaEvent event, long covers, long recordedNanos) {}

    private final int capacity;
    private final ArrayDeque<Entry> entries;
    private final ArrayDeque<Probe> probes = new ArrayDeque<>();
    private final ArrayDeque<CudaEvent> freeEvents = new ArrayDeque<>();
    /** Whether a watchdog probes completion (else the dump says "not tracked"). */
    private volatile boolean tracked;
    /** The newest transaction a probe was recorded after. */
    private long probedThrough;
    /** The newest transaction known complete. */
    private long completedThrough;

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
     * Adds an executed transaction; {@code commands} must be immutable. Called with the comms lock
     * held, right after the transaction was enqueued.
     *
     * @param sequence the transaction's number
     * @param commands the executed commands
     */
    synchronized void add(long sequence, List<Command> commands) {
        addEntry(new Entry(sequence, commands, System.nanoTime()));
    }

    /**
     * Adds a transaction captured into graph {@code graph}: listed, never probed as complete (it
     * never runs; its replays are entries of their own, {@link #addReplay}).
     *
     * @param sequence the transaction's number
     * @param commands the captured commands
     * @param graph    the graph's id
     */
    synchronized void addCaptured(long sequence, List<Command> commands, long graph) {
        addEntry(new Entry(sequence, commands, System.nanoTime(), graph, 0));
    }

    /**
     * Adds a replay of graph {@code graph}, tracked as a transaction: a replay that never completes
     * is caught by the watchdog like one.
     *
     * @param sequence the replay's number (from the transactions' sequence)
     * @param commands every command the graph captured, in capture order
     * @param graph    the graph's id
     */
    synchronized void addReplay(long sequence, List<Command> commands, long graph) {
        addEntry(new Entry(sequence, commands, System.nanoTime(), 0, graph));
    }

    private void addEntry(Entry entry) {
        if (entries.size() == capacity) {
            entries.removeFirst();
        }
        entries.addLast(entry);
    }

    /**
     * Records a probe on {@code stream} when transactions were added since the last one. The caller
     * holds the comms lock (so that nothing is enqueued between the newest entry and the probe).
     *
     * @param stream the comms stream
     */
    synchronized void probe(CudaStream stream) {
        tracked = true;
        Entry newest = entries.peekLast();
        if (newest == null || newest.sequence <= probedThrough) {
            return;
        }
        if (stream.isCapturing()) {
            // A probe recorded into a CUDA graph capture completes only in a launch of the graph, and
            // CUDA forbids querying it meanwhile: the next probe after the capture covers these entries.
            return;
        }
        CudaEvent event = freeEvents.pollFirst();
        if (event == null) {
            event = CudaEvent.create();
        }
        try {
            stream.record(event);
        } catch (RuntimeException e) {
            freeEvents.addLast(event);
            throw e;
        }
        probes.addLast(new Probe(event, newest.sequence, System.nanoTime()));
        probedThrough = newest.sequence;
    }

    /**
     * Marks the entries before every completed probe as complete; returns the oldest entry that a
     * probe still pending was recorded after (it is not done), or null. Called by the watchdog only.
     *
     * @return the oldest entry known pending, or null
     */
    synchronized Entry pollOldestPending() {
        long now = System.nanoTime();
        while (!probes.isEmpty() && probes.peekFirst().event().isComplete()) {
            Probe done = probes.removeFirst();
            completedThrough = done.covers();
            freeEvents.addLast(done.event());
        }
        for (Entry entry : entries) {
            if (entry.completedNanos == 0 && !entry.isCaptured() && entry.sequence <= completedThrough) {
                entry.completedNanos = now;
            }
        }
        if (probes.isEmpty()) {
            return null;
        }
        for (Entry entry : entries) {
            if (entry.completedNanos == 0 && !entry.isCaptured() && entry.sequence <= probes.peekFirst().covers()) {
                return entry;
            }
        }
        return null;
    }

    /**
     * How long the oldest transaction not known to be complete has been waiting (probed or not).
     *
     * @param now the current {@link System#nanoTime()}
     * @return its age in nanoseconds, -1 when every transaction is known complete
     */
    synchronized long oldestUnfinishedAgeNanos(long now) {
        for (Entry entry : entries) {
            if (entry.completedNanos == 0 && !entry.isCaptured()) {
                return entry.ageNanos(now);
            }
        }
        return -1;
    }

    /** {@return a multi-line dump of the recorded transactions, oldest first} */
    synchronized String dump() {
        long now = System.nanoTime();
        StringBuilder sb = new StringBuilder();
        sb.append("last ").append(entries.size()).append(" transaction(s), oldest first:");
        for (Entry entry : entries) {
            sb.append("\n    ").append(entry.describe(now, tracked, entry.sequence <= probedThrough));
        }
        return sb.toString();
    }

    /** Destroys every event this recorder holds. Call only when the comms stream is done or aborted. */
    synchronized void closeEvents() {
        for (Probe probe : probes) {
            closeQuietly(probe.event());
        }
        probes.clear();
        freeEvents.forEach(FlightRecorder::closeQuietly);
        freeEvents.clear();
    }

    private static void closeQuietly(CudaEvent event) {
        try {
            event.close();
        } catch (RuntimeException e) {
            // Best effort during teardown; the communicator logs its own failures.
        }
    }
}
