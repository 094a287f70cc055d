package dev.jnccl;

import dev.jnccl.spi.Command;
import java.util.Arrays;
import java.util.List;
import jdk.jfr.Category;
import jdk.jfr.DataAmount;
import jdk.jfr.Description;
import jdk.jfr.Event;
import jdk.jfr.EventType;
import jdk.jfr.FlightRecorder;
import jdk.jfr.Label;
import jdk.jfr.Name;
import jdk.jfr.StackTrace;

/**
 * JFR events of jnccl. When JFR is off (or the event disabled), {@code new}/{@code begin}/
 * {@code commit} are optimised away by the JIT, so they cost nothing on the hot path.
 */
final class Events {
    private Events() {}

    /** Communicator init: the JFR event {@code jnccl.CommInit}. */
    @Name("jnccl.CommInit")
    @Label("Communicator Init")
    @Category({"jnccl"})
    @Description("Creation of one rank's NCCL communicator, including the wait for the other ranks")
    @StackTrace(false)
    public static final class CommInit extends Event {
        /** The rank. */
        @Label("Rank") public int rank;
        /** The number of ranks. */
        @Label("World Size") public int worldSize;
        /** The CUDA device. */
        @Label("Device") public int device;
        /** The backend, cuda or host. */
        @Label("Backend") public String backend;
        /** The NCCL version. */
        @Label("NCCL Version") public String ncclVersion;

        /** {@return a new event, its duration begun} */
        static CommInit begun() {
            CommInit event = new CommInit();
            event.begin();
            return event;
        }

        /** Fills in and commits the event when JFR records it (nothing otherwise). */
        public void commit(int rank, int worldSize, int device, String backend, String ncclVersion) {
            if (shouldCommit()) {
                this.rank = rank;
                this.worldSize = worldSize;
                this.device = device;
                this.backend = backend;
                this.ncclVersion = ncclVersion;
                commit();
            }
        }
    }

    /** The type of {@link Transaction}, looked up once JFR is initialized. */
    private static volatile EventType transactionType;

    /**
     * Whether a recording wants {@link Transaction} events: asked before one is made, so that the
     * hot path allocates no event while JFR is off (the JIT's escape analysis cannot remove one
     * that the committing path lets escape). Until JFR is initialized in this JVM, one static read.
     *
     * @return whether the event type is enabled in a recording
     */
    static boolean transactionEnabled() {
        if (!FlightRecorder.isInitialized()) {
            return false;
        }
        EventType type = transactionType;
        if (type == null) {
            type = EventType.getEventType(Transaction.class);
            transactionType = type;
        }
        return type.isEnabled();
    }

    /** One transaction's host-side enqueue: the JFR event {@code jnccl.Transaction}. */
    @Name("jnccl.Transaction")
    @Label("Transaction")
    @Category({"jnccl"})
    @Description("Host-side enqueue of one transaction (duration = host time, not GPU time)")
    @StackTrace(false)
    public static final class Transaction extends Event {
        /** The rank. */
        @Label("Rank") public int rank;
        /** The transaction's sequence number on its communicator. */
        @Label("Sequence") public long sequence;
        /** The number of commands. */
        @Label("Commands") public int commands;
        /** The commands' kinds. */
        @Label("Operations") public String operations;
        /** The bytes of all commands. */
        @Label("Bytes") @DataAmount public long bytes;
        /** Empty for a transaction run at once, else "captured into graph #g" or "replay of graph #g". */
        @Label("Graph") public String graph;

        /** Fills in and commits the event when JFR records it (nothing otherwise). */
        public void commit(int rank, long sequence, List<Command> commands) {
            commit(rank, sequence, commands, "");
        }

        /** {@link #commit(int, long, List)} for a captured transaction or a graph replay, {@code graph} says which. */
        public void commit(int rank, long sequence, List<Command> commands, String graph) {
            if (shouldCommit()) {
                this.graph = graph;
                this.rank = rank;
                this.sequence = sequence;
                this.commands = commands.size();
                this.bytes = CommandRunner.bytes(commands);
                this.operations = operations(commands);
                commit();
            }
        }
    }

    /** A communicator abort: the JFR event {@code jnccl.Abort}. */
    @Name("jnccl.Abort")
    @Label("Communicator Abort")
    @Category({"jnccl"})
    @Description("A communicator was aborted")
    public static final class Abort extends Event {
        /** The rank. */
        @Label("Rank") public int rank;
        /** The reason of the abort. */
        @Label("Reason") public String reason;

        /** Creates the event. */
        public Abort() {}

        /** Commits an abort of {@code rank} for {@code reason} when JFR records this event. */
        static void record(int rank, String reason) {
            Abort event = new Abort();
            if (event.shouldCommit()) {
                event.rank = rank;
                event.reason = reason;
                event.commit();
            }
        }
    }

    /** A shrink (see {@link dev.jnccl.Communicator#shrink}): the JFR event {@code jnccl.Shrink}. */
    @Name("jnccl.Shrink")
    @Label("Shrink")
    @Category({"jnccl"})
    @Description("A communicator shrunk to its survivors: which path made the new one, and how long it took")
    @StackTrace(false)
    public static final class Shrink extends Event {
        /** This rank in the old communicator. */
        @Label("Rank") public int rank;
        /** The old number of ranks. */
        @Label("From World") public int fromWorld;
        /** The survivors' number of ranks. */
        @Label("To World") public int toWorld;
        /** The excluded ranks, as "[1, 3]". */
        @Label("Excluded Ranks") public String excluded;
        /** The path that made the new communicator: nccl (ncclCommShrink) or reinit. */
        @Label("Path") public String path;

        /** Creates the event. */
        public Shrink() {}
    }

    /** A grow (see {@link dev.jnccl.Communicator#grow}): the JFR event {@code jnccl.Grow}. */
    @Name("jnccl.Grow")
    @Label("Grow")
    @Category({"jnccl"})
    @Description("A communicator grown by new ranks: which path made the new one, and how long it took")
    @StackTrace(false)
    public static final class Grow extends Event {
        /** This rank (the same in the old and the grown communicator; a new rank's in the grown one). */
        @Label("Rank") public int rank;
        /** The old number of ranks. */
        @Label("From World") public int fromWorld;
        /** The grown number of ranks. */
        @Label("To World") public int toWorld;
        /** The path that made the new communicator: nccl (ncclCommGrow) or reinit. */
        @Label("Path") public String path;

        /** Creates the event. */
        public Grow() {}
    }

    /**
     * The diagnosis of an abort (see {@link dev.jnccl.Diagnosis}), recorded by the rank that made it:
     * the JFR event {@code jnccl.Diagnosis}.
     */
    @Name("jnccl.Diagnosis")
    @Label("Diagnosis")
    @Category({"jnccl"})
    @Description("The verdict the ranks' summaries gave on a hang or a failure, recorded by the rank that diagnosed it")
    @StackTrace(false)
    public static final class Diagnosed extends Event {
        /** The rank that diagnosed. */
        @Label("Rank") public int rank;
        /** The verdict: one line naming the culprit. */
        @Label("Verdict") public String verdict;
        /** Whether every rank answered. */
        @Label("Complete") public boolean complete;
        /** What made the rank diagnose (the watchdog's reason, a host-side deadline). */
        @Label("Trigger") public String trigger;
        /** Every summary, as logged. */
        @Label("Summaries") public String summaries;

        /** Creates the event. */
        public Diagnosed() {}
    }

    /**
     * Each kind's name in the {@code operations} field: its transaction method, capitalized
     * ("AllReduce"), made once: a recording that takes every transaction pays for one string per
     * transaction, not for a stream, a list and a string per command.
     */
    private static final String[] OPERATIONS = Arrays.stream(Command.Kind.values())
            .map(kind -> Character.toUpperCase(kind.method().charAt(0)) + kind.method().substring(1))
            .toArray(String[]::new);

    /** {@return the commands' names as a list prints them: "[ReduceScatter, AllGather]"} */
    private static String operations(List<Command> commands) {
        StringBuilder names = new StringBuilder(16 * commands.size() + 2).append('[');
        for (int i = 0; i < commands.size(); i++) {
            names.append(i == 0 ? "" : ", ").append(OPERATIONS[commands.get(i).kind().ordinal()]);
        }
        return names.append(']').toString();
    }
}
