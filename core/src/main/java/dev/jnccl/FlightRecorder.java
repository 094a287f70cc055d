package dev.jnccl;

import dev.jnccl.spi.Command;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
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
 * transaction cost about as much as the rest of jnccl's own work). A graph replay launched on another
 * stream is covered the same way: the comms stream waits for it before the probe ({@link #joinReplays}).
 */
final class FlightRecorder {

    /**
     * One executed transaction; {@code completedNanos} is set once a probe after it has completed.
     * A slot of the recorder, filled again once it is the oldest (read and written under the
     * recorder's lock): the commands are copied into its array, which grows only for a transaction
     * with more commands than the slot ever held, so that recording allocates nothing in steady
     * state; a replay's slot refers to its graph's captured list instead ({@link #setReplay}). The
     * commands are immutable records, so holding them is as good as a copy of their values.
     */
    static final class Entry {
        long sequence;
        /**
         * How many transactions (and replays) were recorded up to this one: its number as the ranks
         * count alike (see {@link RankSummary}); for a captured one, the count before it.
         */
        long ordinal;
        Command[] commands = new Command[4];
        /** A replay's commands: the graph's captured list itself (see {@link #setReplay}), else null. */
        List<Command> replayed;
        int count;
        long executedNanos;
        /** The graph this transaction was captured into (it never runs itself), or 0. */
        long capturedInto;
        /** The graph this entry is a replay of ({@code Communicator.launch}), or 0. */
        long replayOf;
        long completedNanos;

        void set(long sequence, List<Command> commands, long executedNanos, long capturedInto, long replayOf) {
            int size = commands.size();
            if (size > this.commands.length) {
                this.commands = new Command[Math.max(size, this.commands.length * 2)];
            }
            for (int i = 0; i < size; i++) {
                this.commands[i] = commands.get(i);
            }
            forgetFrom(size);
            this.replayed = null;
            fill(sequence, size, executedNanos, capturedInto, replayOf);
        }

        /**
         * A replay of graph {@code graph}: its commands are the graph's captured list, which no longer
         * changes once the graph exists (a graph is launched only after its capture ended), so the
         * slot refers to it instead of copying it: recording a replay costs the same whatever the
         * number of transactions the graph captured.
         */
        void setReplay(long sequence, List<Command> captured, long executedNanos, long graph) {
            forgetFrom(0);
            this.replayed = captured;
            fill(sequence, captured.size(), executedNanos, 0, graph);
        }

        /** Forgets the copied commands this slot held from {@code index} on (their tensors may be freed). */
        private void forgetFrom(int index) {
            int held = replayed == null ? count : 0;
            for (int i = index; i < held; i++) {
                this.commands[i] = null;
            }
        }

        private void fill(long sequence, int count, long executedNanos, long capturedInto, long replayOf) {
            this.sequence = sequence;
            this.count = count;
            this.executedNanos = executedNanos;
            this.capturedInto = capturedInto;
            this.replayOf = replayOf;
            this.completedNanos = 0;
        }

        /** {@return the {@code i}-th command} */
        Command command(int i) {
            List<Command> shared = replayed;
            return shared != null ? shared.get(i) : commands[i];
        }

        /** {@return whether the entry is a transaction captured into a graph: it never completes itself} */
        boolean isCaptured() {
            return capturedInto != 0;
        }

        /** {@return how the entry is named in messages: "transaction #n" or "replay #n of graph #g"} */
        String name() {
            return name(sequence, replayOf);
        }

        static String name(long sequence, long replayOf) {
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
            sb.append(", ").append(count).append(" command(s)");
            for (int i = 0; i < count; i++) {
                sb.append("\n      ").append(describe(command(i)));
            }
            return sb.toString();
        }

        private static String describe(Command command) {
            return command.describe();
        }
    }

    /**
     * A probe: an event recorded on the comms stream after transaction {@code covers} (ordinal
     * {@code coversOrdinal}). Reused with its event once complete, so that the watchdog's polls
     * allocate nothing while a communicator is busy.
     */
    private static final class Probe {
        final CudaEvent event;
        long covers;
        long coversOrdinal;

        Probe(CudaEvent event) {
            this.event = event;
        }
    }

    /**
     * What the watchdog learns of the oldest pending transaction: a copy of the slot's numbers (the
     * slot is filled again once it is the oldest), into an object the watchdog keeps and passes to
     * every poll, so that a poll allocates nothing; the name is made only for a message.
     */
    static final class Pending {
        private long sequence;
        private long replayOf;
        private long executedNanos;

        /** {@return how the entry is named in messages} */
        String name() {
            return Entry.name(sequence, replayOf);
        }

        /** {@return nanoseconds since the execute, at {@code now}} */
        long ageNanos(long now) {
            return now - executedNanos;
        }
    }

    private final int capacity;
    /** The slots, made as the first {@code capacity} transactions come, then reused oldest first. */
    private final Entry[] slots;
    /** The index of the oldest entry in {@link #slots}. */
    private int first;
    /** How many slots hold an entry. */
    private int size;
    private final ArrayDeque<Probe> probes = new ArrayDeque<>();
    /** Completed probes, kept with their events for the next ones. */
    private final ArrayDeque<Probe> freeProbes = new ArrayDeque<>();
    /** Whether a watchdog probes completion (else the dump says "not tracked"). */
    private volatile boolean tracked;
    /** The newest transaction a probe was recorded after. */
    private long probedThrough;
    /** The newest transaction known complete. */
    private long completedThrough;
    /** How many transactions were recorded (see {@link Entry#ordinal}). */
    private long recorded;
    /** The ordinal of the newest transaction known complete. */
    private long completedOrdinal;
    /**
     * Recorded after the last graph replay launched on another stream than the comms stream, which
     * has not waited for it yet ({@link #joinReplays}), or null. Read and written with the comms
     * lock held.
     */
    private CudaEvent unjoinedReplays;

    /**
     * A recorder of the last {@code capacity} transactions.
     *
     * @param capacity how many transactions it keeps (at least 1)
     */
    FlightRecorder(int capacity) {
        this.capacity = capacity;
        this.slots = new Entry[capacity];
    }

    /**
     * Adds an executed transaction (its commands are copied). Called with the comms lock held,
     * right after the transaction was enqueued.
     *
     * @param sequence the transaction's number
     * @param commands the executed commands
     */
    synchronized void add(long sequence, List<Command> commands) {
        addEntry(sequence, commands, 0, 0).ordinal = ++recorded;
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
        addEntry(sequence, commands, graph, 0).ordinal = recorded;
    }

    /**
     * Adds a replay of graph {@code graph}, tracked as a transaction: a replay that never completes
     * is caught by the watchdog like one.
     *
     * @param sequence the replay's number (from the transactions' sequence)
     * @param commands every command the graph captured, in capture order: kept, not copied (the
     *                 graph's captured list, which no longer changes)
     * @param graph    the graph's id
     */
    synchronized void addReplay(long sequence, List<Command> commands, long graph) {
        Entry entry = nextSlot();
        entry.setReplay(sequence, commands, System.nanoTime(), graph);
        entry.ordinal = ++recorded;
    }

    private Entry addEntry(long sequence, List<Command> commands, long capturedInto, long replayOf) {
        Entry entry = nextSlot();
        entry.set(sequence, commands, System.nanoTime(), capturedInto, replayOf);
        return entry;
    }

    /**
     * Notes that replays ran on another stream, {@code after} recorded there after the last of them:
     * the comms stream waits for it before its next work ({@link #joinReplays}), not at each replay,
     * so that a loop replaying its step on one stream pays for no comms-stream call. The caller
     * holds the comms lock.
     */
    void replayedElsewhere(CudaEvent after) {
        unjoinedReplays = after;
    }

    /**
     * Makes the comms stream wait for the replays launched elsewhere since it last did: called, with
     * the comms lock held, before anything else goes on the comms stream (a transaction, a replay on
     * another stream, a wait for the comms stream, a probe, the close's drain), so that NCCL sees this
     * communicator's work in order on every rank and the next probe covers the replays. Nothing
     * when there are none, nor while the comms stream captures a CUDA graph (the wait would become
     * part of the graph): the first call after the capture makes it.
     *
     * @param stream the comms stream
     */
    void joinReplays(CudaStream stream) {
        CudaEvent unjoined = unjoinedReplays;
        if (unjoined != null && !stream.isCapturing()) {
            stream.waitFor(unjoined);
            unjoinedReplays = null;
        }
    }

    /** {@return the slot of the next entry: a new one while fewer than the capacity, else the oldest} */
    private Entry nextSlot() {
        int index;
        if (size == capacity) {
            index = first;
            first = (first + 1) % capacity;
        } else {
            index = (first + size) % capacity;
            size++;
        }
        Entry entry = slots[index];
        if (entry == null) {
            entry = new Entry();
            slots[index] = entry;
        }
        return entry;
    }

    /** {@return the {@code k}-th entry, oldest first} */
    private Entry entry(int k) {
        return slots[(first + k) % capacity];
    }

    /** {@return the newest entry, or null} */
    private Entry newest() {
        return size == 0 ? null : entry(size - 1);
    }

    /**
     * Records a probe on {@code stream} when transactions were added since the last one. The caller
     * holds the comms lock (so that nothing is enqueued between the newest entry and the probe). The
     * record itself happens outside this recorder's monitor: CUDA may block it behind a full launch
     * queue, and a summary of this rank ({@link #pending}, read by a diagnosing peer) must not wait.
     *
     * @param stream the comms stream
     */
    void probe(CudaStream stream) {
        Probe probe;
        long covers;
        long coversOrdinal;
        synchronized (this) {
            tracked = true;
            Entry newest = newest();
            if (newest == null || newest.sequence <= probedThrough) {
                return;
            }
            if (stream.isCapturing()) {
                // A probe recorded into a CUDA graph capture completes only in a launch of the graph, and
                // CUDA forbids querying it meanwhile: the next probe after the capture covers these entries.
                return;
            }
            probe = freeProbes.pollFirst();
            covers = newest.sequence;
            coversOrdinal = newest.ordinal;
        }
        if (probe == null) {
            probe = new Probe(CudaEvent.create());
        }
        try {
            joinReplays(stream);
            stream.record(probe.event);
        } catch (RuntimeException e) {
            synchronized (this) {
                freeProbes.addLast(probe);
            }
            throw e;
        }
        synchronized (this) {
            probe.covers = covers;
            probe.coversOrdinal = coversOrdinal;
            probes.addLast(probe);
            probedThrough = covers;
        }
    }

    /**
     * Marks the entries before every completed probe as complete; fills {@code into} with the oldest
     * entry that a probe still pending was recorded after (it is not done). Called by the watchdog only.
     *
     * @param into where the oldest entry known pending is copied
     * @return whether there is one (else {@code into} is left as it was)
     */
    synchronized boolean pollOldestPending(Pending into) {
        long now = System.nanoTime();
        while (!probes.isEmpty() && probes.peekFirst().event.isComplete()) {
            Probe done = probes.removeFirst();
            completedThrough = done.covers;
            completedOrdinal = Math.max(completedOrdinal, done.coversOrdinal);
            freeProbes.addLast(done);
        }
        for (int k = 0; k < size; k++) {
            Entry entry = entry(k);
            if (entry.completedNanos == 0 && !entry.isCaptured() && entry.sequence <= completedThrough) {
                entry.completedNanos = now;
            }
        }
        if (probes.isEmpty()) {
            return false;
        }
        for (int k = 0; k < size; k++) {
            Entry entry = entry(k);
            if (entry.completedNanos == 0 && !entry.isCaptured() && entry.sequence <= probes.peekFirst().covers) {
                into.sequence = entry.sequence;
                into.replayOf = entry.replayOf;
                into.executedNanos = entry.executedNanos;
                return true;
            }
        }
        return false;
    }

    /**
     * How long the oldest transaction not known to be complete has been waiting (probed or not).
     *
     * @param now the current {@link System#nanoTime()}
     * @return its age in nanoseconds, -1 when every transaction is known complete
     */
    synchronized long oldestUnfinishedAgeNanos(long now) {
        for (int k = 0; k < size; k++) {
            Entry entry = entry(k);
            if (entry.completedNanos == 0 && !entry.isCaptured()) {
                return entry.ageNanos(now);
            }
        }
        return -1;
    }

    /**
     * Marks every transaction recorded so far complete: the comms stream has run them all (a
     * synchronize of the communicator returned). Cheaper than a probe, and exact.
     *
     * @param ordinal the count of transactions recorded when the stream's wait was recorded
     */
    synchronized void completedThrough(long ordinal) {
        completedOrdinal = Math.max(completedOrdinal, ordinal);
        long now = System.nanoTime();
        // Newest first, down to the first entry known complete: the ones before it are known already.
        for (int k = size - 1; k >= 0; k--) {
            Entry entry = entry(k);
            if (entry.ordinal <= ordinal && !entry.isCaptured()) {
                if (entry.completedNanos != 0) {
                    break;
                }
                entry.completedNanos = now;
            }
        }
    }

    /** {@return how many transactions are known complete (see {@link Entry#ordinal})} */
    synchronized long completed() {
        return completedOrdinal;
    }

    /** {@return how many transactions were recorded} */
    synchronized long recorded() {
        return recorded;
    }

    /**
     * The oldest transactions recorded and not known complete, for a {@link RankSummary}.
     *
     * @param max how many at most
     * @return them, oldest first, numbered by ordinal
     */
    synchronized List<RankSummary.Pending> pending(int max) {
        List<RankSummary.Pending> pending = new ArrayList<>();
        for (int k = 0; k < size && pending.size() < max; k++) {
            Entry entry = entry(k);
            if (!entry.isCaptured() && entry.ordinal > completedOrdinal) {
                List<String> commands = new ArrayList<>(entry.count);
                for (int i = 0; i < entry.count; i++) {
                    commands.add(entry.command(i).describe());
                }
                pending.add(new RankSummary.Pending(entry.ordinal, commands));
            }
        }
        return pending;
    }

    /** {@return a multi-line dump of the recorded transactions, oldest first} */
    synchronized String dump() {
        long now = System.nanoTime();
        StringBuilder sb = new StringBuilder();
        sb.append("last ").append(size).append(" transaction(s), oldest first:");
        for (int k = 0; k < size; k++) {
            Entry entry = entry(k);
            sb.append("\n    ").append(entry.describe(now, tracked, entry.sequence <= probedThrough));
        }
        return sb.toString();
    }

    /** Destroys every event this recorder holds. Call only when the comms stream is done or aborted. */
    synchronized void closeEvents() {
        for (Probe probe : probes) {
            closeQuietly(probe.event);
        }
        probes.clear();
        for (Probe probe : freeProbes) {
            closeQuietly(probe.event);
        }
        freeProbes.clear();
    }

    private static void closeQuietly(CudaEvent event) {
        try {
            event.close();
        } catch (RuntimeException e) {
            // Best effort during teardown; the communicator logs its own failures.
        }
    }
}
