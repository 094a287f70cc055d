package dev.jnccl;

import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.internal.Backoff;
import java.util.Optional;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The waits of one communicator on its own communication ({@code synchronize}, {@code await},
 * {@code waitOnComms}): each notices an abort (by the watchdog, a failed peer) and NCCL's
 * asynchronous errors while it waits, backs off instead of spinning, and ends on an interrupt.
 */
final class Waits {
    private final Communicator face;
    private final ReentrantLock lock;
    private final NcclComm comm;
    private final CudaStream stream;
    private final FlightRecorder recorder;
    private final Forensics forensics;
    /** Recorded on the comms stream for {@code synchronize} and {@code waitOnComms}. */
    private final CudaEvent commsDone;

    Waits(Communicator face, ReentrantLock lock, NcclComm comm, CudaStream stream, FlightRecorder recorder,
          Forensics forensics, CudaEvent commsDone) {
        this.face = face;
        this.lock = lock;
        this.comm = comm;
        this.stream = stream;
        this.recorder = recorder;
        this.forensics = forensics;
        this.commsDone = commsDone;
    }

    /** See {@link Communicator#waitOnComms}. */
    void waitOnComms(CudaStream waiting) {
        lock.lock();
        try {
            face.requireUsable("waitOnComms");
            recorder.joinReplays(stream); // the replays are this communicator's work too
            orderAfterComms(waiting);
        } finally {
            lock.unlock();
        }
    }

    /**
     * {@code waiting} waits for all communication enqueued so far; the caller holds the lock, checked
     * the state and made the comms stream join the replays (a transaction's enqueue does).
     */
    void orderAfterComms(CudaStream waiting) {
        stream.record(commsDone);
        waiting.waitFor(commsDone);
    }

    /** See {@link Communicator#synchronize}. */
    void synchronize() {
        refuseInsideCapture("synchronize");
        int before = forensics.enter(Forensics.SYNCHRONIZE);
        try {
            long through;
            lock.lock();
            try {
                face.requireUsable("synchronize");
                recorder.joinReplays(stream);
                stream.record(commsDone);
                through = recorder.recorded();
            } finally {
                lock.unlock();
            }
            awaitEvent(commsDone);
            recorder.completedThrough(through); // exact, where the watchdog's probes may lag
        } finally {
            forensics.exit(before);
        }
    }

    /** See {@link Communicator#await}. */
    void await(CudaEvent event) {
        refuseInsideCapture("await");
        int before = forensics.enter(Forensics.AWAIT);
        try {
            awaitEvent(event);
        } finally {
            forensics.exit(before);
        }
    }

    /** The wait, checked. */
    private void awaitEvent(CudaEvent event) {
        long spins = 0;
        while (true) {
            lock.lock();
            try {
                face.requireUsable("await");
                boolean complete = event.isComplete();
                // A failed collective can still let the event complete (or never): NCCL reports it
                // only through the asynchronous error, so look at it before saying "done" and
                // every so often while waiting.
                if (complete || (spins & 1023) == 1023) {
                    String failure = comm.asyncFailure();
                    if (failure != null) {
                        face.abortDiagnosedHoldingLock("await: " + failure);
                        face.requireUsable("await");
                    }
                }
                if (complete) {
                    // An abort from another thread (the pack, a peer's failure) does not wait for this
                    // lock: it may have ended the work, and released the handles the failure check
                    // reads, after the first look at the state. It marks the state first, so a second
                    // look tells work that completed from work the abort ended.
                    face.requireUsable("await");
                    return;
                }
            } finally {
                lock.unlock();
            }
            if (Backoff.pauseOrInterrupted(spins++)) {
                face.requireUsable("await"); // an abort that came with the interrupt (a failing pack) says more
                throw new JncclInterruptedException("await: rank " + face.rank() + " was interrupted while waiting"
                        + " for " + event + "; the communication enqueued before was not cancelled",
                        new InterruptedException("await interrupted"));
            }
        }
    }

    /**
     * Refuses a wait made inside {@link CudaGraph#capture}: the captured communication runs only
     * when the graph is launched, and CUDA would invalidate the capture.
     */
    void refuseInsideCapture(String operation) {
        Optional<CudaStream> capture = CudaGraph.currentCapture();
        if (capture.isPresent()) {
            throw new IllegalStateException(operation + ": rank " + face.rank() + " was asked to wait inside a CUDA"
                    + " graph capture on " + capture.get() + " (CudaGraph.capture): the captured communication runs"
                    + " only when the graph is launched; wait after the capture, or after launching the graph");
        }
    }
}
