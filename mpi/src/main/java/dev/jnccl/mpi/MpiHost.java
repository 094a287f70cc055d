package dev.jnccl.mpi;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.Diagnosis;
import dev.jnccl.RankSummary;
import dev.jnccl.spi.Diagnoses;
import dev.jnccl.spi.Failures;
import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.Membership;
import dev.jnccl.spi.RankEvents;
import dev.jnccl.spi.RankParts;
import dev.jnccl.spi.Transport;
import dev.jnccl.mpi.internal.MpiLibrary;
import dev.jnccl.internal.Backoff;
import dev.jnccl.internal.Deadlines;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The host side of this process's rank under MPI: barrier and host gathers over its own MPI
 * communicator (a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so jnccl's messages never mix
 * with the application's and its error handling leaves the application's communicators alone). It
 * is the rank's events too (MPI_Comm_split before each split, the closing exchange, freeing the MPI
 * communicator) and its failures (the watchdog's poll for a peer that closed early, MPI_Abort after
 * an abort). No launch-queue pace: one process drives one GPU.
 *
 * <p>Every host-side rendezvous (barrier, host gathers, the colour exchange of a split) starts with
 * the arrival messages of {@link MpiLibrary#arrive}: so one that ends at its deadline, or on an
 * interrupt, names the ranks that did not arrive. That costs each rank size - 1 zero-byte messages
 * sent and as many received per rendezvous (O(size) per rank, O(size²) in the job), host-side only:
 * transactions never take this path. The barrier is that exchange alone; a gather runs its MPI
 * collectives after it, within the same deadline. After an abort (watchdog, failed transaction,
 * {@code abort}) it ends the whole job with MPI_Abort (see {@link JobEnd}); a clean close frees the
 * MPI communicator and finalizes MPI if jnccl initialised it.
 *
 * <p>The consistency checks ({@code jnccl.debug=detail}) meet in rendezvous of their own, with tags
 * of their own ({@link #CHECK_TAG}): a rank that skipped a step and went on to a barrier is never
 * paired with its peers' check of that step. A hang is diagnosed over {@link MpiDiagnoses}: every
 * rank's summary gathered by point-to-point messages on tags of their own, the verdict spread to the
 * peers with the abort; a host-side wait past its deadline is diagnosed the same way.
 */
final class MpiHost implements HostSide, RankEvents, Failures {
    private static final Logger LOG = LoggerFactory.getLogger(MpiHost.class);
    /** The exit code of a job ended by a failing rank. */
    static final int ABORT_EXIT_CODE = 1;
    /** The tag of the closing messages on jnccl's own MPI communicators (no other point-to-point traffic there). */
    private static final int CLOSING_TAG = 0x6a6e;
    /**
     * The first tag of the arrival messages of host-side rendezvous, which take the tags from here
     * on in turn (below {@link #CLOSING_TAG}; MPI guarantees tags up to 32767).
     */
    private static final int ARRIVAL_TAG = 0x4000;
    /**
     * How many arrival tags rendezvous cycle through: a message of a rendezvous left at its deadline
     * (whose communicator is aborted, and the MPI job ended, next) could only be mistaken for one of
     * the rendezvous this many later.
     */
    private static final int ARRIVAL_TAGS = 0x2000;
    /** The first tag of the consistency checks' arrival messages (below {@link #ARRIVAL_TAG}), taken in turn. */
    private static final int CHECK_TAG = 0x2000;
    /** How long a transaction must have waited before a peer's close makes it hopeless (not just slow to finish). */
    private static final long PENDING_GRACE_NANOS = TimeUnit.SECONDS.toNanos(1);
    /** How long a host-side operation may still complete after a rank is known to have closed. */
    private static final long CLOSED_GRACE_NANOS = TimeUnit.SECONDS.toNanos(2);
    /**
     * How long a peer has to answer before it counts as lost ({@link MpiOptions#minWorld}): it answers
     * from a thread of its own that polls every few milliseconds, so only a process that is gone (or
     * stopped for this long) misses it.
     */
    static final long PROBE_MILLIS = 3_000;
    /** The tag of the survivors' arrival messages on the old communicator (a communicator shrinks once). */
    private static final int SHRINK_TAG = 0x6003;
    /** The tag of the survivors' MPI_Comm_create_group on the old communicator. */
    private static final int SHRINK_GROUP_TAG = 0x6004;

    private final MpiLibrary mpi;
    /** This communicator's host collectives: jnccl's duplicate of MPI_COMM_WORLD, or a split of it. */
    private final MpiLibrary.Handle comm;
    /** Where MPI_Abort goes: the duplicate of MPI_COMM_WORLD, so that a failing child ends the whole job. */
    private final MpiLibrary.Handle job;
    /** Null, or MPI_Finalize once this and every survivors' communicator made from it are closed. */
    private final MpiFinalizer finalizer;
    /** 0: an abort ends the job; else the fewest ranks the survivors of a lost rank go on with. */
    private final int minWorld;
    /** The host side of the communicator this one was split from, or null. */
    private final MpiHost parent;
    /** The ranks found lost when this communicator was aborted (see {@link #explainAbort}); empty: none. */
    private volatile List<Integer> lost = List.of();
    /** Whether the peers were probed for lost ranks (once per communicator; guarded by this). */
    private boolean probed;
    /** The peers the probe found gone (guarded by this). */
    private List<Integer> probeResult = List.of();
    /** Whether the survivors' host side was made from this one: its end no longer ends the job. */
    private volatile boolean shrunk;
    private final int rank;
    private final int worldSize;
    /** How messages name this rank: "rank R", or "rank P (rank R of a split)" with P its rank in the parent. */
    private final String who;
    /** Appended to the ranks of this communicator that messages name: "" or " of the split". */
    private final String scope;
    /** The host-side rendezvous of this communicator so far (each one's number and arrival tag). */
    private final java.util.concurrent.atomic.AtomicLong rendezvous = new java.util.concurrent.atomic.AtomicLong();
    /** The consistency checks of this communicator so far (each one's number and arrival tag). */
    private final java.util.concurrent.atomic.AtomicLong checks = new java.util.concurrent.atomic.AtomicLong();
    /** The diagnoses' channel between the ranks. */
    private final MpiDiagnoses diagnoses;
    /** Whether every rank of the job has aborted, as far as this process heard (its first communicator's channel). */
    private final java.util.function.BooleanSupplier jobAborted;
    /** The communicator these parts serve, once attached. */
    private volatile Communicator communicator;
    /** Why this communicator was aborted, or null: ends this rank's host-side waits at once. */
    private volatile String abortedWith;
    /** The MPI side of the split in progress ({@link #beforeSplit}), taken by {@link #split}. */
    private MpiLibrary.Handle pendingSplit;
    /** Per rank: the transactions it executed before it closed, -1 while it has not said (guards itself). */
    private final long[] closedAfter;

    private MpiHost(MpiLibrary mpi, MpiLibrary.Handle comm, MpiLibrary.Handle job, MpiFinalizer finalizer,
                    int minWorld, MpiHost parent, java.util.function.BooleanSupplier jobAborted, int rank,
                    int worldSize, String who, String scope) {
        this.mpi = mpi;
        this.comm = comm;
        this.job = job;
        this.finalizer = finalizer;
        this.minWorld = minWorld;
        this.parent = parent;
        this.rank = rank;
        this.worldSize = worldSize;
        this.who = who;
        this.scope = scope;
        this.closedAfter = new long[worldSize];
        java.util.Arrays.fill(closedAfter, -1);
        this.diagnoses = new MpiDiagnoses(mpi, comm, rank, worldSize, this::closedAfter);
        this.jobAborted = jobAborted != null ? jobAborted : diagnoses::allAborted;
    }

    /**
     * The parts of this process's communicator over {@code comm} (jnccl's duplicate of
     * MPI_COMM_WORLD), NCCL moving every command.
     *
     * @param finalizeTimeout null, or the bound of MPI_Finalize when jnccl initialised MPI
     * @param minWorld        0, or the fewest ranks the survivors of a lost rank go on with
     */
    static RankParts parts(MpiLibrary mpi, MpiLibrary.Handle comm, int rank, int worldSize, Duration finalizeTimeout,
                           int minWorld) {
        return parts(new MpiHost(mpi, comm, comm, finalizeTimeout == null ? null : new MpiFinalizer(finalizeTimeout),
                minWorld, null, null, rank, worldSize, "rank " + rank, ""));
    }

    /** {@code host} as the host side, events and failures of a rank whose commands all move through NCCL. */
    private static RankParts parts(MpiHost host) {
        return new RankParts(host, Transport.NCCL, host, host);
    }

    @Override
    public void barrier(long timeoutNanos) {
        diagnosed(() -> arrive("barrier", timeoutNanos));
    }

    @Override
    public List<byte[]> gather(byte[] local, int root, long timeoutNanos) {
        return diagnosed(() -> mpi.gather(local, root, comm, arrive("gatherBytesHost", timeoutNanos)));
    }

    @Override
    public List<byte[]> allGather(byte[] local, long timeoutNanos) {
        return diagnosed(() -> mpi.allGather(local, comm, arrive("allGatherBytesHost", timeoutNanos)));
    }

    /** The consistency check's all-gather, in rendezvous of its own (see the class comment). */
    @Override
    public List<byte[]> consistencyCheck(byte[] fingerprint, long timeoutNanos) {
        return diagnosed(() -> {
            long number = checks.incrementAndGet();
            MpiLibrary.Wait wait = waitFor("consistency check #" + number, timeoutNanos);
            mpi.arrive(comm, rank, worldSize, CHECK_TAG + (int) (number % ARRIVAL_TAGS), who, scope, wait);
            return mpi.allGather(fingerprint, comm, wait);
        });
    }

    /**
     * The next rendezvous of this communicator, named "operation #N" in messages: waits (bounded)
     * until every rank has arrived, naming the ones that did not; returns the wait, whose deadline
     * the operation's MPI collectives share.
     */
    private MpiLibrary.Wait arrive(String operation, long timeoutNanos) {
        long number = rendezvous.incrementAndGet();
        MpiLibrary.Wait wait = waitFor(operation + " #" + number, timeoutNanos);
        mpi.arrive(comm, rank, worldSize, ARRIVAL_TAG + (int) (number % ARRIVAL_TAGS), who, scope, wait);
        return wait;
    }

    /**
     * A host-side wait: bounded, interruptible, ended at once when this communicator was aborted (a
     * peer's abort reached it), and ended when another rank has closed (it will never arrive) and the
     * operation is still pending {@link #CLOSED_GRACE_NANOS} later (the rank that closed may have
     * joined the operation before it did: MPI then completes it soon).
     */
    private MpiLibrary.Wait waitFor(String operation, long timeoutNanos) {
        long[] closedSeen = {0};
        return new MpiLibrary.Wait(operation, timeoutNanos, () -> {
            String aborted = abortedWith;
            if (aborted != null) {
                return "this rank's communicator was aborted: " + firstLine(aborted);
            }
            int closed = firstClosed();
            if (closed < 0) {
                return null;
            }
            long now = System.nanoTime();
            if (closedSeen[0] == 0) {
                closedSeen[0] = now | 1; // never 0
            }
            return now - closedSeen[0] <= CLOSED_GRACE_NANOS ? null : "rank " + closed
                    + " closed its communicator after " + closedAfter[closed] + " transaction(s) and will not arrive";
        });
    }

    private static String firstLine(String text) {
        int end = text.indexOf('\n');
        return end < 0 ? text : text.substring(0, end);
    }

    /**
     * Runs a host-side call; a wait of it that ended at its deadline (or because a rank closed, or a
     * peer aborted) is a hang, diagnosed before the communicator is aborted, as the watchdog's would
     * be: the exception's message then leads with the verdict. An interrupt is its own cause: not
     * diagnosed, but led by a peer's verdict when one is known.
     */
    private <T> T diagnosed(Supplier<T> call) {
        try {
            return call.get();
        } catch (CommunicatorAbortedException e) {
            Communicator face = communicator;
            if (e.diagnosis().isPresent() || face == null) {
                throw e;
            }
            Diagnosis made = diagnoses.diagnosis();
            if (made == null && !(e.getCause() instanceof InterruptedException)) {
                try {
                    made = Diagnoses.diagnose(face, e.getMessage());
                } catch (RuntimeException failed) {
                    LOG.warn("rank {}: the diagnosis of a host-side deadline failed", rank, failed);
                }
            }
            if (made == null) {
                throw e;
            }
            throw new CommunicatorAbortedException(Diagnoses.lead(made, e.getMessage()), e.getCause(), made);
        }
    }

    // ---------------------------------------------------------------- closing
    //
    // A rank whose code throws inside try-with-resources reaches close() while its peers wait in a
    // collective it will never join; nothing in close() can tell that from a healthy rank that is
    // merely the first to finish. So each closing rank tells the others how many transactions it
    // executed: a peer whose watchdog sees that it waits in a later transaction ends the job
    // (MPI_Abort) within a watchdog interval or so, while a peer that is behind closes normally once
    // it gets there, and every rank's close waits (bounded) for all the others' messages, so every
    // message is received before MPI is finalized.

    /** Records the closing messages that have arrived; returns the first rank known to have closed, or -1. */
    private int firstClosed() {
        synchronized (closedAfter) {
            int first = -1;
            for (int peer = 0; peer < worldSize; peer++) {
                if (peer != rank && closedAfter[peer] < 0) {
                    java.util.OptionalLong value = mpi.receiveLong(peer, CLOSING_TAG, comm);
                    if (value.isPresent()) {
                        closedAfter[peer] = value.getAsLong();
                    }
                }
                if (peer != rank && closedAfter[peer] >= 0 && first < 0) {
                    first = peer;
                }
            }
            return first;
        }
    }

    /** {@return the transactions {@code peer} executed before it closed, -1 while it has not said} */
    private long closedAfter(int peer) {
        firstClosed();
        synchronized (closedAfter) {
            return closedAfter[peer];
        }
    }

    @Override
    public String poll(long executed, long pendingNanos) {
        if (worldSize == 1 || pendingNanos < PENDING_GRACE_NANOS) {
            return null;
        }
        firstClosed();
        synchronized (closedAfter) {
            for (int peer = 0; peer < worldSize; peer++) {
                if (peer != rank && closedAfter[peer] >= 0 && closedAfter[peer] < executed) {
                    return "rank " + peer + " closed its communicator after " + closedAfter[peer] + " transaction(s)"
                            + " while this rank executed " + executed + " and has waited "
                            + TimeUnit.NANOSECONDS.toMillis(pendingNanos) + " ms for the last ones: they wait for a"
                            + " rank that will not join them";
                }
            }
        }
        return null;
    }

    @Override
    public String closing(long executed, long timeoutNanos) {
        if (worldSize == 1) {
            return null;
        }
        for (int peer = 0; peer < worldSize; peer++) {
            if (peer != rank) {
                mpi.sendLong(executed, peer, CLOSING_TAG, comm);
            }
        }
        long deadline = Deadlines.deadline(System.nanoTime(), timeoutNanos);
        long polls = 0;
        while (true) {
            firstClosed();
            List<Integer> missing = new ArrayList<>();
            synchronized (closedAfter) {
                for (int peer = 0; peer < worldSize; peer++) {
                    if (peer != rank && closedAfter[peer] < 0) {
                        missing.add(peer);
                    }
                }
            }
            if (missing.isEmpty()) {
                return null;
            }
            String aborted = abortedWith;
            if (aborted != null) {
                return "close: aborted while waiting for the other ranks to close: " + firstLine(aborted);
            }
            if (Deadlines.passed(deadline)) {
                return "close: " + (missing.size() == 1 ? "rank " + missing.getFirst() : "ranks " + missing)
                        + " did not close within " + TimeUnit.NANOSECONDS.toMillis(timeoutNanos)
                        + " ms (CommunicatorOptions.closeTimeout)";
            }
            if (Backoff.pauseOrInterrupted(polls++)) {
                return "close: interrupted while waiting for the other ranks to close";
            }
        }
    }

    /**
     * MPI_Comm_split needs every rank of this communicator, members of the NCCL split or not: same
     * colors (negative: MPI_UNDEFINED), same keys, so that MPI orders the members as NCCL does (by
     * key, then by rank here).
     */
    @Override
    public void beforeSplit(int color, int key) {
        MpiLibrary.Handle previous = pendingSplit;
        pendingSplit = null;
        if (previous != null && !previous.equals(mpi.commNull())) {
            mpi.free(previous); // a split whose NCCL part failed on this rank
        }
        // Blocking: MPI has no non-blocking split. It runs right after the bounded exchange of the
        // colours and keys (every rank arrived there and goes straight on to this call), so only a
        // rank that dies in between keeps it waiting, and the launcher ends the job for a dead rank.
        pendingSplit = mpi.split(comm, color < 0 ? MpiLibrary.UNDEFINED : color, key);
    }

    /** A member of a split: host collectives over the MPI split of the same colors and keys. */
    @Override
    public RankParts split(Membership membership) {
        MpiLibrary.Handle childComm = pendingSplit;
        pendingSplit = null;
        if (childComm == null || childComm.equals(mpi.commNull())) {
            throw new IllegalStateException("split: rank " + rank + " is a member of color " + membership.color()
                    + " for NCCL but MPI_Comm_split gave it no communicator");
        }
        requirePlace(childComm, membership, "split", "MPI_Comm_split");
        return parts(new MpiHost(mpi, childComm, job, null, minWorld, this, jobAborted, membership.rank(),
                membership.worldSize(), "rank " + membership.parent().rank() + " (rank " + membership.rank()
                + " of a split)", " of the split"));
    }

    /**
     * The survivors' host side, made by the survivors alone (the excluded ranks may be dead): a
     * bounded rendezvous of point-to-point messages among them (tag {@link #SHRINK_TAG}, the init
     * timeout, ended only by its deadline or an interrupt: this communicator is usually aborted
     * already), then their own MPI communicator by MPI_Comm_create_group, which only the group's
     * members call. The survivors' communicator keeps this one's job, finalizer and minWorld.
     */
    @Override
    public RankParts shrink(Membership survivors) {
        int[] members = survivors.members().stream().mapToInt(Integer::intValue).toArray();
        int[] others = java.util.Arrays.stream(members).filter(r -> r != rank).toArray();
        Communicator face = communicator;
        long timeout = face == null ? Long.MAX_VALUE : Deadlines.toNanos(face.options().initTimeout());
        mpi.arrive(comm, others, SHRINK_TAG, who, scope, new MpiLibrary.Wait("shrink (the survivors "
                + survivors.members() + " meet)", timeout, () -> null));
        MpiLibrary.Handle survivorsComm = mpi.createGroup(comm, members, SHRINK_GROUP_TAG);
        requirePlace(survivorsComm, survivors, "shrink", "MPI_Comm_create_group");
        mpi.setErrorsReturn(survivorsComm);
        shrunk = true;
        if (finalizer != null) {
            finalizer.hold();
        }
        return parts(new MpiHost(mpi, survivorsComm, job, finalizer, minWorld, null, null, survivors.rank(),
                survivors.worldSize(), "rank " + survivors.rank() + " (rank " + rank + scope + " before the loss)",
                ""));
    }

    /**
     * Refuses (and frees) the MPI communicator {@code made} by {@code call} unless it gives this rank
     * the rank and size jnccl's {@code membership} does: the host side must number ranks as NCCL does.
     */
    private void requirePlace(MpiLibrary.Handle made, Membership membership, String operation, String call) {
        int mpiRank = mpi.rank(made);
        int mpiSize = mpi.size(made);
        if (mpiRank != membership.rank() || mpiSize != membership.worldSize()) {
            mpi.free(made);
            throw new IllegalStateException(operation + ": NCCL made rank " + membership.rank() + " of "
                    + membership.worldSize() + " but " + call + " rank " + mpiRank + " of " + mpiSize);
        }
    }

    // ---------------------------------------------------------------- failures and diagnoses

    /** Starts answering the peers' requests for this rank's summary. */
    @Override
    public void attached(Communicator face) {
        communicator = face;
        diagnoses.start(face);
    }

    /** Every rank's summary over MPI (see {@link MpiDiagnoses#summaries}). */
    @Override
    public List<RankSummary> summaries(RankSummary own, long timeoutNanos) {
        return diagnoses.summaries(own, timeoutNanos);
    }

    @Override
    public Diagnosis diagnosed(Diagnosis diagnosis) {
        return diagnoses.diagnosed(diagnosis);
    }

    @Override
    public Diagnosis diagnosis() {
        return diagnoses.diagnosis();
    }

    /**
     * A peer's abort that reached this rank first leads this rank's own reason (once). With
     * {@link MpiOptions#minWorld} set, the first abort of this open communicator looks for lost
     * ranks first (before any call can find it aborted): see {@link #findLost}.
     */
    @Override
    public String explainAbort(String reason) {
        String peer = diagnoses.peerAbort();
        String explained = peer == null || reason.contains(peer) ? reason : peer + "; then: " + reason;
        return minWorld == 0 ? explained : findLost(explained);
    }

    /**
     * The reason, saying which ranks are lost: once per communicator, when it is still open, every
     * peer is asked for its summary; the ones that do not answer within {@link #PROBE_MILLIS} are
     * lost. When some are, and at least {@link MpiOptions#minWorld} ranks remain, {@link #lostRanks}
     * names them from now on and the abort does not end the job. Two aborts of this rank at once
     * (its own thread's and a peer's, say) both wait for the one probe, so whichever wins reports it.
     */
    private String findLost(String reason) {
        List<Integer> gone = probeOnce();
        if (gone.isEmpty()) {
            return reason;
        }
        int left = worldSize - gone.size();
        if (left < minWorld) {
            return reason + " (" + lostText(gone) + " lost" + scope + ": " + left + " left, fewer than the "
                    + minWorld + " of MpiOptions.withContinueWithoutFailedRanks: the job ends)";
        }
        return reason + " (" + lostText(gone) + " lost" + scope + ": " + (gone.size() == 1 ? "its process is"
                : "their processes are") + " gone)";
    }

    /** The peers found gone by the first call (bounded by {@link #PROBE_MILLIS}); later calls wait for it. */
    private synchronized List<Integer> probeOnce() {
        if (probed) {
            return probeResult;
        }
        probed = true;
        Communicator face = communicator;
        if (face == null || face.isAborted() || face.isClosed()) {
            return probeResult;
        }
        probeResult = diagnoses.unreachable(TimeUnit.MILLISECONDS.toNanos(PROBE_MILLIS));
        int left = worldSize - probeResult.size();
        if (!probeResult.isEmpty() && left >= minWorld) {
            lost = List.copyOf(probeResult);
            if (finalizer != null) {
                finalizer.lost(lostText(probeResult) + " lost");
            }
            LOG.warn("{}: {} lost{} (no answer within {} ms): the {} survivors go on without {}", who,
                    lostText(probeResult), scope, PROBE_MILLIS, left, probeResult.size() == 1 ? "it" : "them");
        }
        return probeResult;
    }

    private static String lostText(List<Integer> ranks) {
        return ranks.size() == 1 ? "rank " + ranks.getFirst() : "ranks " + ranks;
    }

    /** {@return the ranks found lost when this communicator was aborted, sorted; empty when none} */
    @Override
    public List<Integer> lostRanks() {
        return lost;
    }

    /** Whether this communicator's end must not end the job: ranks were lost (here or above), or it was shrunk. */
    private boolean goesOn() {
        return shrunk || !lost.isEmpty() || (parent != null && parent.goesOn());
    }

    /** Ends this rank's host-side waits and tells the peers, with the diagnosis this rank holds. */
    @Override
    public void aborting(String reason) {
        abortedWith = reason;
        diagnoses.aborting(reason);
    }

    /**
     * The NCCL communicator is aborted: end the job, or peers blocked in NCCL or MPI would wait
     * forever; once the peers have aborted too (bounded), so that each reports its exception first.
     */
    @Override
    public void aborted(String reason) {
        if (goesOn()) {
            LOG.info("{}: communicator aborted, the job goes on: {}", who, firstLine(reason));
            return;
        }
        JobEnd.begin(mpi, job, rank, worldSize, reason, jobAborted);
    }

    @Override
    public void closed(boolean aborted) {
        // Never attached: survivors' parts of a shrink that failed before a communicator took them.
        if (aborted && !goesOn() && communicator != null) {
            // The job is being ended with MPI_Abort (its diagnoses' channel still hears the peers'
            // aborts): the closing thread waits for that end, as MpiCommunicators.run does, rather
            // than going on (and maybe ending the process) before the peers have reported theirs.
            Communicator face = communicator;
            JobEnd.await(face == null ? 0 : face.options().closeTimeout().toMillis() + 1_000);
            return;
        }
        diagnoses.stop();
        if (pendingSplit != null && !pendingSplit.equals(mpi.commNull())) {
            mpi.free(pendingSplit);
        }
        try {
            mpi.free(comm);
        } finally {
            if (finalizer != null) {
                finalizer.release(mpi, rank);
            }
        }
    }
}
