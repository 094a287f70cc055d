package dev.jnccl;

import dev.jnccl.cuda.CudaStream;
import dev.jnccl.internal.Captures;
import dev.jnccl.spi.Command;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The commands of the transactions one communicator captured into each CUDA graph (by graph id),
 * in capture order: what a replay through the communicator runs and the flight recorder lists, and
 * what keeps the communicator from closing under a graph that still uses it. Filed by the capturing
 * thread holding the communicator's native lock; read by replays and close.
 *
 * <p>Also what spares a replay its wait for the comms stream (see {@link #mustWaitForComms}): the
 * stream the last replay ran on, and how many transactions and replays had been executed then.
 * Read and written with the native lock held.
 */
final class GraphReplays {
    private final Map<Long, List<Command>> capturedByGraph = new ConcurrentHashMap<>();
    /** The graph replayed last, with its captured commands (see {@link #captured}). */
    private Replayed lastReplayed;
    /** The stream of the last replay, which then stood after all the comms stream's work; null before. */
    private CudaStream joinedStream;
    /** The communicator's executed count right after that replay (its own count included). */
    private long joinedAt = -1;
    /** How many replays waited for the comms stream: tells a test which path ran. */
    private long commsWaits;

    /** A graph's id and captured commands; immutable, so a racing reader sees either the old or the new one whole. */
    private record Replayed(long graph, List<Command> commands) { }

    /** Files the commands of a transaction captured into {@code graph}. */
    void file(long graph, List<Command> commands) {
        capturedByGraph.computeIfAbsent(graph, this::startList).addAll(commands);
    }

    /** The list of a graph's first captured transaction; drops the lists of graphs closed since. */
    private List<Command> startList(long graph) {
        capturedByGraph.keySet().removeIf(id -> id != graph && !Captures.isOpen(id));
        return new ArrayList<>();
    }

    /**
     * The commands {@code graph} captured, or null. The last graph replayed is remembered: a training
     * loop replays the same graph step after step, and the map's lookup would box its id every time.
     */
    List<Command> captured(long graph) {
        Replayed last = lastReplayed;
        if (last != null && last.graph() == graph) {
            return last.commands();
        }
        List<Command> captured = capturedByGraph.get(graph);
        if (captured != null) {
            lastReplayed = new Replayed(graph, captured);
        }
        return captured;
    }

    /**
     * Whether a replay on {@code stream} must first make it wait for the comms stream, so that the
     * graph's NCCL work runs after the communicator's work enqueued before it, as NCCL needs on every
     * rank. Not when the last replay ran on the same stream (compared by identity: another wrapper
     * of the same CUDA stream just waits) and nothing was executed on the comms stream since: that
     * stream already stands after all of it, the comms stream having at most waited for the replays
     * on that stream since. Counted when it must.
     *
     * @param executed the transactions and replays this communicator has executed so far
     */
    boolean mustWaitForComms(CudaStream stream, long executed) {
        if (stream == joinedStream && executed == joinedAt) {
            return false;
        }
        commsWaits++;
        return true;
    }

    /** Notes that a replay on {@code stream} was launched and the comms stream ordered after it, {@code executed} then. */
    void replayedOn(CudaStream stream, long executed) {
        joinedStream = stream;
        joinedAt = executed;
    }

    /** {@return how many replays waited for the comms stream before their launch} */
    long commsWaits() {
        return commsWaits;
    }

    /**
     * Refuses to close while a graph that captured this communicator's transactions is open: its
     * NCCL nodes use the communicator's resources, and a replay after the close would use them freed.
     */
    void refuseOpenGraphs(int rank, int worldSize) {
        for (Map.Entry<Long, List<Command>> captured : capturedByGraph.entrySet()) {
            if (Captures.isOpen(captured.getKey())) {
                throw new IllegalStateException("close: CUDA graph #" + captured.getKey() + " captured "
                        + captured.getValue().size() + " command(s) of rank " + rank + " of " + worldSize
                        + " and is still open: close the graph first (its NCCL nodes use this communicator)");
            }
        }
    }
}
