package dev.jnccl.mpi;

import dev.jnccl.Communicator;
import dev.jnccl.Diagnosis;
import dev.jnccl.RankSummary;
import dev.jnccl.internal.Deadlines;
import dev.jnccl.mpi.internal.MpiLibrary;
import dev.jnccl.spi.Diagnoses;
import java.io.DataInputStream;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import java.util.function.IntToLongFunction;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The channel of one MPI-mode communicator's diagnoses: point-to-point messages on jnccl's own MPI
 * communicator, on tags nothing else there uses (the rendezvous take {@code 0x2000..0x5fff}, the
 * closing messages {@code 0x6a6e}), so none can pair with a barrier, a gather or a consistency check.
 * <ul>
 *   <li>A rank that diagnoses an abort posts a request to every peer and polls, bounded, for their
 *       summaries ({@link #summaries}); a peer that has closed is described by the count its closing
 *       message gave, one that does not answer in time as absent.</li>
 *   <li>Each rank answers from a daemon thread of its own ({@code jnccl-mpi-diagnoses-rank-R}),
 *       polling every {@value #POLL_MILLIS} ms: the rank's own thread may be stuck inside NCCL or busy
 *       in user code, and a summary is a snapshot that waits for nothing.</li>
 *   <li>A rank that aborts tells every peer why, with the diagnosis it holds ({@link #aborting}); a
 *       peer whose communicator is still open adopts that diagnosis (the first one received stands)
 *       and aborts too, on a thread of its own, so that every rank's exception leads with the same
 *       verdict. The same messages tell each rank which peers have aborted ({@link #allAborted}),
 *       which is when the job may end.</li>
 * </ul>
 */
final class MpiDiagnoses {
    private static final Logger LOG = LoggerFactory.getLogger(MpiDiagnoses.class);
    /** A request for the receiver's summary: the requester's rank, the exchange's number. */
    static final int REQUEST_TAG = 0x6000;
    /** A summary answering a request: the answering rank, the exchange's number, the summary. */
    static final int ANSWER_TAG = 0x6001;
    /** A rank aborted: its rank, its reason, whether a diagnosis follows, the diagnosis. */
    static final int ABORTED_TAG = 0x6002;
    static final long POLL_MILLIS = 10;

    private final MpiLibrary mpi;
    private final MpiLibrary.Handle comm;
    private final int rank;
    private final int size;
    /** The count a peer's closing message gave, -1 before it came (MpiHost's record of them). */
    private final IntToLongFunction closedAfter;
    /** The diagnosis every rank's abort leads with: this rank's, or the first a peer sent. */
    private final AtomicReference<Diagnosis> diagnosis = new AtomicReference<>();
    /** How long each peer has been silent over the exchanges (guarded by this). */
    private final Silences silences;
    /** Per rank: whether it has said that it aborted (this rank's own entry: whether it aborted). */
    private final boolean[] aborted;
    /** The first reason a peer gave for its abort, or null. */
    private volatile String peerAbort;
    /** Whether a peer's abort has started this rank's (one thread for it, however many peers abort). */
    private final java.util.concurrent.atomic.AtomicBoolean following = new java.util.concurrent.atomic.AtomicBoolean();
    private volatile Communicator communicator;
    private volatile Thread answering;

    MpiDiagnoses(MpiLibrary mpi, MpiLibrary.Handle comm, int rank, int size, IntToLongFunction closedAfter) {
        this.mpi = mpi;
        this.comm = comm;
        this.rank = rank;
        this.size = size;
        this.closedAfter = closedAfter;
        this.aborted = new boolean[size];
        this.silences = new Silences(size);
    }

    /** Starts answering the peers for {@code face} (no thread in a world of one). */
    void start(Communicator face) {
        communicator = face;
        if (size > 1) {
            answering = Thread.ofPlatform().daemon().name("jnccl-mpi-diagnoses-rank-" + rank).start(this::answer);
        }
    }

    /** Stops answering (before jnccl's MPI communicator is freed); waits a moment for the thread to leave MPI. */
    void stop() {
        Thread thread = answering;
        answering = null;
        if (thread != null) {
            LockSupport.unpark(thread);
            try {
                thread.join(TimeUnit.SECONDS.toMillis(1));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** The answering thread: requests, then aborts of peers, every {@value #POLL_MILLIS} ms until stopped. */
    private void answer() {
        Thread self = Thread.currentThread();
        try {
            // Once, ahead of any request: a first answer must not spend the requester's short bound loading classes.
            SummaryCodec.readSummary(SummaryCodec.reader(SummaryCodec.bytes(
                    out -> SummaryCodec.writeSummary(out, Diagnoses.summary(communicator)))));
        } catch (IOException | RuntimeException e) {
            LOG.warn("rank {}: this rank's summary cannot be encoded; it answers no requests", rank, e);
            return;
        }
        while (answering == self) {
            try {
                for (Optional<byte[]> m = mpi.receiveAny(REQUEST_TAG, comm); m.isPresent(); m = mpi.receiveAny(
                        REQUEST_TAG, comm)) {
                    answerRequest(SummaryCodec.reader(m.get()));
                }
                for (Optional<byte[]> m = mpi.receiveAny(ABORTED_TAG, comm); m.isPresent(); m = mpi.receiveAny(
                        ABORTED_TAG, comm)) {
                    peerAborted(SummaryCodec.reader(m.get()));
                }
            } catch (IOException | RuntimeException e) {
                LOG.warn("rank {}: answering the other ranks' diagnoses failed; this rank answers no more", rank, e);
                return;
            }
            LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(POLL_MILLIS));
        }
    }

    private void answerRequest(DataInputStream in) throws IOException {
        int requester = in.readInt();
        long exchange = in.readLong();
        RankSummary summary = Diagnoses.summary(communicator);
        mpi.post(SummaryCodec.bytes(out -> {
            out.writeInt(rank);
            out.writeLong(exchange);
            SummaryCodec.writeSummary(out, summary);
        }), requester, ANSWER_TAG, comm);
    }

    /** A peer aborted: adopt its diagnosis unless one came first, and abort this rank too (on a thread of its own). */
    private void peerAborted(DataInputStream in) throws IOException {
        int peer = in.readInt();
        String reason = in.readUTF();
        Diagnosis theirs = in.readBoolean() ? SummaryCodec.readDiagnosis(in) : null;
        synchronized (aborted) {
            aborted[peer] = true;
        }
        if (theirs != null) {
            diagnosis.compareAndSet(null, theirs);
        }
        if (peerAbort == null) {
            peerAbort = "rank " + peer + " aborted: " + reason;
        }
        Communicator face = communicator;
        if (face != null && !face.isAborted() && !face.isClosed() && following.compareAndSet(false, true)) {
            String why = peerAbort;
            // Not on this thread: NCCL's abort may take a while, and requests must still be answered.
            Thread.ofPlatform().daemon().name("jnccl-mpi-peer-abort-rank-" + rank).start(() -> face.abort(why));
        }
    }

    /** {@return the first reason a peer gave for its abort, or null} */
    String peerAbort() {
        return peerAbort;
    }

    /**
     * Every rank's summary, in rank order, within {@code timeoutNanos}: a request to each peer, then
     * their answers as they come. One exchange at a time per communicator (a watchdog and a host-side
     * deadline of the same rank take turns); answers to an earlier exchange are dropped.
     */
    synchronized List<RankSummary> summaries(RankSummary own, long timeoutNanos) {
        long exchange = ThreadLocalRandom.current().nextLong();
        byte[] request = SummaryCodec.bytes(out -> {
            out.writeInt(rank);
            out.writeLong(exchange);
        });
        RankSummary[] all = new RankSummary[size];
        all[rank] = own;
        int missing = size - 1;
        boolean[] refused = new boolean[size];
        long posted = System.nanoTime();
        for (int peer = 0; peer < size; peer++) {
            if (peer != rank) {
                try {
                    mpi.post(request, peer, REQUEST_TAG, comm);
                } catch (RuntimeException e) {
                    // MPI knows the peer is gone (a launcher that keeps the job running after a death).
                    all[peer] = Diagnoses.absent(peer, size, "its process is gone (" + e.getMessage() + ")");
                    refused[peer] = true;
                    missing--;
                }
            }
        }
        long start = System.nanoTime();
        long deadline = Deadlines.deadline(start, timeoutNanos);
        while (missing > 0 && !Deadlines.passed(deadline)) {
            Optional<byte[]> answer = mpi.receiveAny(ANSWER_TAG, comm);
            if (answer.isEmpty()) {
                LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(1));
                continue;
            }
            missing -= accept(answer.get(), exchange, all);
        }
        boolean[] answered = new boolean[size];
        for (int peer = 0; peer < size; peer++) {
            answered[peer] = peer == rank || (all[peer] != null && !refused[peer]);
        }
        silences.exchanged(posted, answered, refused);
        return unanswered(all, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start));
    }

    /**
     * The peers that have not answered a request for their summary for {@code timeoutNanos}: their
     * processes are gone (a live peer answers from its own thread whatever its rank's thread does).
     * A peer that closed its communicator is not among them. The silence of the exchange just
     * before (the abort's diagnosis) counts: a peer silent there is asked again only for the rest
     * of the bound (see {@link Silences}).
     */
    synchronized List<Integer> unreachable(long timeoutNanos) {
        List<Integer> gone = new ArrayList<>();
        long wait = silences.probeNanos(timeoutNanos, System.nanoTime());
        List<RankSummary> all = summaries(Diagnoses.summary(communicator), wait);
        long now = System.nanoTime();
        for (RankSummary summary : all) {
            if (summary.status() == RankSummary.Status.ABSENT && summary.rank() != rank
                    && silences.goneAfter(summary.rank(), timeoutNanos, now)) {
                gone.add(summary.rank());
            }
        }
        if (wait < timeoutNanos) {
            LOG.info("rank {}: probe for lost ranks waited {} ms (silent since the exchange before: the rest of {} ms);"
                    + " gone: {}", rank, TimeUnit.NANOSECONDS.toMillis(wait), TimeUnit.NANOSECONDS.toMillis(timeoutNanos),
                    gone);
        }
        return gone;
    }

    /** Files an answer of exchange {@code exchange} in {@code all}; {@return 1 when it is a new one, else 0} */
    private int accept(byte[] answer, long exchange, RankSummary[] all) {
        try {
            DataInputStream in = SummaryCodec.reader(answer);
            int peer = in.readInt();
            if (in.readLong() != exchange || peer < 0 || peer >= size || all[peer] != null) {
                return 0;
            }
            all[peer] = SummaryCodec.readSummary(in);
            return 1;
        } catch (IOException | RuntimeException e) {
            LOG.warn("rank {}: a peer's summary could not be read", rank, e);
            return 0;
        }
    }

    /** {@code all} with a summary for each peer that gave none: closed (as its closing message said), or absent. */
    private List<RankSummary> unanswered(RankSummary[] all, long waitedMillis) {
        List<RankSummary> summaries = new ArrayList<>(Arrays.asList(all));
        for (int peer = 0; peer < size; peer++) {
            if (all[peer] != null) {
                continue;
            }
            long closed = closedAfter.applyAsLong(peer);
            summaries.set(peer, closed >= 0
                    ? new RankSummary(peer, size, RankSummary.Status.CLOSED, "", closed, closed, List.of(),
                            RankSummary.Activity.UNKNOWN, "", "", "", List.of())
                    : Diagnoses.absent(peer, size, "its process is gone or did not answer within " + waitedMillis
                            + " ms"));
        }
        return summaries;
    }

    /** Keeps {@code made} unless a diagnosis came first; {@return the diagnosis that stands} */
    Diagnosis diagnosed(Diagnosis made) {
        diagnosis.compareAndSet(null, made);
        return diagnosis.get();
    }

    /** {@return the diagnosis this rank holds (its own, or a peer's), or null} */
    Diagnosis diagnosis() {
        return diagnosis.get();
    }

    /** This rank aborts for {@code reason}: tells every peer, with the diagnosis it holds. */
    void aborting(String reason) {
        synchronized (aborted) {
            aborted[rank] = true;
        }
        Diagnosis held = diagnosis.get();
        byte[] message = SummaryCodec.bytes(out -> {
            out.writeInt(rank);
            SummaryCodec.writeText(out, reason);
            out.writeBoolean(held != null);
            if (held != null) {
                SummaryCodec.writeDiagnosis(out, held);
            }
        });
        for (int peer = 0; peer < size; peer++) {
            if (peer != rank) {
                try {
                    mpi.post(message, peer, ABORTED_TAG, comm);
                } catch (RuntimeException e) {
                    LOG.warn("rank {}: telling rank {} of the abort failed", rank, peer, e);
                }
            }
        }
    }

    /** {@return whether every rank has aborted, as far as this rank has heard} */
    boolean allAborted() {
        synchronized (aborted) {
            for (boolean a : aborted) {
                if (!a) {
                    return false;
                }
            }
            return true;
        }
    }
}
