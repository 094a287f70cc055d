package dev.jnccl;

import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.internal.Captures;
import dev.jnccl.spi.Command;
import dev.jnccl.spi.RankEvents;
import dev.jnccl.spi.Transport;
import java.util.List;
import java.util.concurrent.locks.ReentrantLock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The path of one transaction (and of one graph replay) of a communicator, as a short sequence of
 * stages: pace (the launcher keeps a rank from running far ahead, outside the lock), the
 * consistency check when it is on (the ranks compare the commands, outside the lock), lock, capture
 * (whether the comms stream joins a CUDA graph capture), transport (before), NCCL (the command
 * runner), transport (after) and the signal, recorder (the flight recorder, or the graph's captured
 * list), events (DEBUG line, JFR). Each stage is one method below; {@link #execute} reads as the
 * list. Allocates nothing unless DEBUG logging or a JFR recording asks for it.
 */
final class ExecutePipeline {
    private static final Logger LOG = LoggerFactory.getLogger(Communicator.class);

    private final Communicator face;
    private final TransactionLog log;
    private final RankEvents events;
    /** The bound of the pace (the host side's bound). */
    private final long hostTimeoutNanos;
    private final ReentrantLock lock;
    private final CudaStream stream;
    private final Transport transport;
    private final CommandRunner runner;
    private final FlightRecorder recorder;
    private final GraphReplays replays;
    /** Recorded on the comms stream for a replay's stream to wait for, when it must ({@link #launchOrdered}). */
    private final CudaEvent replayReady;
    /** Recorded on a replay's stream after the launch, for the comms stream to wait for. */
    private final CudaEvent replayDone;
    /** The consistency check, or null when it is off: then its cost is this one null test per transaction. */
    private final ConsistencyCheck consistency;
    /** Where the calling thread is (pace, then the enqueue), for a summary of this rank. */
    private final Forensics forensics;
    /** A convenience operation's caller stream waits for the comms stream through it. */
    private final Waits waits;

    ExecutePipeline(Communicator face, TransactionLog log, RankEvents events, long hostTimeoutNanos, ReentrantLock lock,
                    CudaStream stream, Transport transport, CommandRunner runner, FlightRecorder recorder,
                    GraphReplays replays, CudaEvent replayReady, CudaEvent replayDone, ConsistencyCheck consistency) {
        this.face = face;
        this.log = log;
        this.events = events;
        this.hostTimeoutNanos = hostTimeoutNanos;
        this.lock = lock;
        this.stream = stream;
        this.transport = transport;
        this.runner = runner;
        this.recorder = recorder;
        this.replays = replays;
        this.replayReady = replayReady;
        this.replayDone = replayDone;
        this.consistency = consistency;
        this.forensics = face.forensics();
        this.waits = face.waits();
    }

    /**
     * Executes the open transaction (its handle checked it): see {@link Transaction#execute}. The
     * stages in order: pace (outside the lock: the launcher may wait here for slower ranks, and an
     * abort from another thread, a failing pack or the watchdog, must not wait for this one
     * meanwhile; skipped inside a capture, where a transaction puts nothing in the launch queue the
     * pace bounds, it runs only in the graph's replays, each paced once, and every rank capturing
     * the same step skips the same count), the consistency check when on (also inside a capture: a
     * captured transaction is checked once, when it is captured), lock, capture, transport and NCCL,
     * recorder, events.
     */
    void execute(CudaEvent signal) {
        execute(signal, null);
    }

    /**
     * {@link #execute(CudaEvent)}, for a convenience operation when {@code caller} is not null: then,
     * under the same lock hold as the commands, the ready event is recorded on {@code caller} first
     * (the commands run after its work so far) and {@code caller} waits for the comms stream last
     * (its later work runs after them): the native calls of the three steps a convenience operation
     * took one lock hold each for before, in the same order, with one lock round trip and one state
     * check instead of three.
     *
     * @param signal recorded on the comms stream after the commands, or null
     * @param caller the convenience operation's stream, or null for a transaction
     */
    void execute(CudaEvent signal, CudaStream caller) {
        int before = forensics.enter(Forensics.PACE);
        try {
            paceAndEnqueue(signal, caller);
        } finally {
            forensics.exit(before);
        }
    }

    /** {@link #execute}'s stages, the calling thread's activity kept up to date (pace, then the enqueue). */
    private void paceAndEnqueue(CudaEvent signal, CudaStream caller) {
        long number = log.openNumber();
        CudaEvent ready = log.openReady();
        // No event object while JFR does not record it: the hot path allocates nothing.
        Events.Transaction event = Events.transactionEnabled() ? new Events.Transaction() : null;
        if (event != null) {
            event.begin();
        }
        paceAndCheck(number);
        forensics.now(Forensics.EXECUTE);
        List<Command> executed = log.commands().view();
        long graph;
        boolean reported = LOG.isDebugEnabled() || (event != null && event.shouldCommit());
        lock.lock();
        try {
            face.requireUsable("execute");
            if (caller != null) {
                caller.record(ready);
            }
            stream.waitFor(ready);
            graph = capturedInto();
            enqueue(number, executed, graph, signal);
            record(number, executed, graph);
            if (caller != null) {
                waits.orderAfterComms(caller);
            }
            if (reported) {
                // The buffer serves the next transaction, which another thread may open once this one ends.
                executed = List.copyOf(executed);
            }
        } finally {
            log.ended(number, true); // executed (or failed trying): never again through its handle
            lock.unlock();
        }
        if (reported) {
            report(number, executed, graph, false, event);
        }
    }

    /**
     * Stages pace and consistency check, outside the lock (see {@link #execute}); a refusal ends the
     * transaction unexecuted.
     */
    private void paceAndCheck(long number) {
        try {
            face.requireUsable("execute");
            if (Captures.currentCaptureId() == 0) {
                events.pace(hostTimeoutNanos);
            }
            if (consistency != null) {
                consistency.verify("transaction #" + number + (Captures.currentCaptureId() == 0 ? ""
                        : " (in a CUDA graph capture)"), log.commands().view(), "execute");
            }
        } catch (RuntimeException e) {
            throw refusedBeforeEnqueue(number, e);
        }
    }

    /** A refusal of the pace (or of a communicator no longer usable) ends the transaction, unexecuted. */
    private RuntimeException refusedBeforeEnqueue(long number, RuntimeException failure) {
        if (failure instanceof CommunicatorAbortedException) {
            face.abort(failure.getMessage()); // as the host-side calls do
        }
        log.commands().clear();
        log.ended(number, true);
        return face.lossOr(failure);
    }

    /**
     * Stage capture: the graph the comms stream is capturing into for this thread's
     * {@link CudaGraph#capture}, or 0. Asks CUDA only inside a capture: outside, one volatile read.
     * (A ready event recorded in a capture made the comms stream join it, a fork; one recorded outside
     * while the comms stream captures is an external wait.)
     */
    private long capturedInto() {
        long capture = Captures.currentCaptureId();
        return capture != 0 && stream.isCapturing() ? capture : 0;
    }

    /**
     * Stages transport, NCCL, signal. A failure after the transport accepted the transaction aborts
     * the communicator (something may be half enqueued); one before leaves it usable.
     */
    private void enqueue(long number, List<Command> executed, long graph, CudaEvent signal) {
        boolean enqueuing = false;
        try {
            if (graph == 0) {
                recorder.joinReplays(stream); // after the replays launched on another stream
            }
            transport.beforeCommands(executed, stream);
            enqueuing = true;
            // Counted before the commands go to NCCL (not before the transport, which may refuse the
            // transaction): a rank held inside this enqueue (real NCCL connects to its peers in the
            // first collectives, in ncclGroupEnd) has committed to it, and a peer that closed after
            // fewer will never join it (the watchdog's poll of the host side). A captured transaction
            // runs only in replays, each counted by its launch.
            if (graph == 0) {
                log.countExecuted();
            }
            runner.run(executed);
            transport.afterCommands(stream);
            if (signal != null) {
                stream.record(signal);
            }
        } catch (RuntimeException e) {
            log.commands().clear();
            throw face.failedInNative("execute of transaction #" + number, e, enqueuing);
        }
    }

    /**
     * Stage recorder: the watchdog probes the transaction's completion off this path; a captured one
     * is filed under its graph. The buffer keeps the commands until the next transaction opens (the
     * recorder copies them).
     */
    private void record(long number, List<Command> executed, long graph) {
        if (graph == 0) {
            recorder.add(number, executed);
        } else {
            recorder.addCaptured(number, executed, graph);
            replays.file(graph, executed);
        }
    }

    /**
     * Stage events: the DEBUG line, and the JFR event when a recording wants it (sizes summed and the
     * graph's words made only then).
     *
     * @param graph  the graph the transaction was captured into ({@code replay}: the graph replayed), or 0
     */
    private void report(long number, List<Command> executed, long graph, boolean replay, Events.Transaction event) {
        boolean debug = LOG.isDebugEnabled();
        boolean jfr = event != null && event.shouldCommit();
        if (!debug && !jfr) {
            return;
        }
        String graphWords = graph == 0 ? "" : (replay ? "replay of graph #" : "captured into graph #") + graph;
        if (debug) {
            LOG.debug("rank {} transaction #{}{}: {} command(s), {} bytes: {}", face.rank(), number,
                    graphWords.isEmpty() ? "" : " (" + graphWords + ")", executed.size(), CommandRunner.bytes(executed),
                    executed);
        }
        if (jfr) {
            event.commit(face.rank(), number, executed, graphWords);
        }
    }

    /**
     * A replay of {@code graph} as one transaction, the same stages: pace, the consistency check when
     * on (by the commands the graph replays: graph ids differ between ranks), lock, the launch on
     * {@code userStream} ordered with the comms stream ({@link #launchOrdered}), recorder ("replay of
     * graph #id", probed like any other: the comms stream waited for it), events.
     */
    void replay(CudaGraph graph, CudaStream userStream, List<Command> captured) {
        Events.Transaction event = Events.transactionEnabled() ? new Events.Transaction() : null;
        if (event != null) {
            event.begin();
        }
        try {
            events.pace(hostTimeoutNanos);
            if (consistency != null) {
                consistency.verify("replay of graph #" + graph.id(), captured, "launch");
            }
        } catch (CommunicatorAbortedException e) {
            face.abort(e.getMessage()); // as execute does
            throw e;
        }
        long number;
        lock.lock();
        try {
            face.requireUsable("launch");
            number = log.nextNumber("launch");
            launchOrdered(graph, userStream);
            log.countExecuted();
            replays.replayedOn(userStream, log.executed());
            recorder.addReplay(number, captured, graph.id());
        } finally {
            lock.unlock();
        }
        report(number, captured, graph.id(), true, event);
    }

    /**
     * Launches {@code graph} on {@code userStream}, as C's {@code cudaGraphLaunch(exec, stream)} does,
     * in order with the comms stream both ways, so that NCCL sees this communicator's work in the
     * same order on every rank: {@code userStream} first waits for the comms stream's work so far,
     * unless it already stands after all of it ({@link GraphReplays#mustWaitForComms}: the common
     * case of a loop replaying its step on one stream); then an event is recorded after the launch,
     * which the comms stream waits for before its next work ({@link FlightRecorder#joinReplays}):
     * later transactions run after the replay, and the watchdog's next probe covers it. A loop of
     * replays on one stream thus makes one launch and one event record each. On the comms stream
     * itself nothing needs ordering. A failure once the graph is launched aborts (the comms stream
     * could run ahead of the replay's NCCL work); one before leaves the communicator usable.
     */
    private void launchOrdered(CudaGraph graph, CudaStream userStream) {
        boolean elsewhere = userStream != stream;
        try {
            boolean waits = elsewhere && replays.mustWaitForComms(userStream, log.executed());
            if (waits || !elsewhere) {
                recorder.joinReplays(stream); // after replays launched elsewhere (on another stream)
            }
            if (waits) {
                stream.record(replayReady);
                userStream.waitFor(replayReady);
            }
            graph.launch(userStream);
        } catch (RuntimeException e) {
            throw face.failedInNative("launch of " + graph, e, false);
        }
        if (elsewhere) {
            try {
                userStream.record(replayDone);
            } catch (RuntimeException e) {
                throw face.failedInNative("launch of " + graph, e, true);
            }
            recorder.replayedElsewhere(replayDone);
        }
    }
}
