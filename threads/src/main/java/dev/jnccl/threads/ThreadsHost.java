package dev.jnccl.threads;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.Diagnosis;
import dev.jnccl.GrowTicket;
import dev.jnccl.RankSummary;
import dev.jnccl.spi.Diagnoses;
import dev.jnccl.spi.Failures;
import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.Membership;
import dev.jnccl.spi.RankEvents;
import dev.jnccl.spi.RankParts;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * One rank of a threads-mode pack as the launcher's host side, events and failures (the transport is
 * {@link CopyEngineTransport}'s or NCCL's): barrier, host gathers and splits into child packs through
 * the pack's shared state; the launch-queue pace and the rank's registration with its pack; the
 * pack's failure handling, where a failed rank releases and aborts every other rank (see
 * {@link PackState}).
 */
final class ThreadsHost implements HostSide, RankEvents, Failures {
    /** How long this rank's last transactions wait before a peer that closed after fewer ends them (see {@link #poll}). */
    private static final long PENDING_GRACE_NANOS = TimeUnit.SECONDS.toNanos(1);

    private final PackState pack;
    private final ThreadsOptions options;
    private final int rank;
    /** The rank's thread: an abort that happens on it releases user code that may free buffers. */
    private final Thread owner = Thread.currentThread();
    private long transactions;
    /** Splits made from this communicator so far: every rank counts the same (split is collective). */
    private long splits;
    /** Shrinks of this communicator so far: every survivor counts the same (shrink is collective among them). */
    private long shrinks;

    ThreadsHost(PackState pack, ThreadsOptions options, int rank) {
        this.pack = pack;
        this.options = options;
        this.rank = rank;
    }

    /** This rank's parts: one of these as host side, events and failures; the transport {@code options} ask for. */
    static RankParts parts(PackState pack, ThreadsOptions options, int rank) {
        ThreadsHost host = new ThreadsHost(pack, options, rank);
        return new RankParts(host, CopyEngineTransport.of(pack, options, rank, pack.size()), host, host);
    }

    @Override
    public void attached(Communicator communicator) {
        pack.register(rank, communicator);
    }

    @Override
    public void barrier(long timeoutNanos) {
        pack.barrier("barrier", rank, timeoutNanos);
    }

    @Override
    public List<byte[]> gather(byte[] local, int root, long timeoutNanos) {
        List<byte[]> all = pack.exchange("gatherBytesHost", rank, local.clone(), timeoutNanos);
        return rank == root ? copies(all) : List.of();
    }

    @Override
    public List<byte[]> allGather(byte[] local, long timeoutNanos) {
        return copies(pack.exchange("allGatherBytesHost", rank, local.clone(), timeoutNanos));
    }

    /** Every rank gets arrays of its own: the exchanged ones are shared by the whole pack. */
    private static List<byte[]> copies(List<byte[]> shared) {
        List<byte[]> own = new ArrayList<>(shared.size());
        for (byte[] bytes : shared) {
            own.add(bytes.clone());
        }
        return own;
    }

    /** Counted on every rank, members or not, so that the n-th split has the same number everywhere. */
    @Override
    public void beforeSplit(int color, int key) {
        splits++;
    }

    /**
     * The ranks of one color share a child pack (barrier, gathers, throttle, failure) that is tied
     * to this pack both ways: a failure in either releases and aborts the ranks of both.
     */
    @Override
    public RankParts split(Membership membership) {
        PackState childPack = pack.child(splits, membership.color(), membership.members());
        return parts(childPack, options, membership.rank());
    }

    /**
     * The survivors share a pack of their own (barrier, gathers, throttle, failure) that never waits
     * for an excluded rank. A failure among the survivors fails this pack too (so that
     * {@link ThreadsPack#join()} reports it), but this pack's failure, which is usually the loss the
     * survivors answer, does not reach them.
     */
    @Override
    public RankParts shrink(Membership survivors) {
        PackState survivorsPack = pack.survivors(++shrinks, survivors.members());
        return parts(survivorsPack, options, survivors.rank());
    }

    /** The grown world shares a pack of its own with the replacement ranks the launch starts (see {@link Replacements}). */
    @Override
    public RankParts grow(Communicator existing, GrowTicket ticket) {
        return parts(pack.grown(ticket), options, existing.rank());
    }

    /** One replacement per lost rank while the launch has spare devices (see {@link Replacements#answer}). */
    @Override
    public int replacements(List<Integer> lostRanks) {
        Replacements spares = pack.replacements();
        return spares == null ? 0 : spares.answer(pack, lostRanks);
    }

    @Override
    public void replace(GrowTicket ticket) {
        Replacements spares = pack.replacements();
        if (spares != null) {
            spares.start(ticket, pack.grown(ticket));
        }
    }

    @Override
    public String cancellation() {
        return pack.cancellation();
    }

    /**
     * Waits while this rank is more than {@link ThreadsOptions#maxLead()} transactions ahead of the
     * slowest rank. One process drives all GPUs here; a thread that runs far ahead fills its
     * device's launch queue, and once that is full the CUDA launch blocks inside the driver, which
     * can stall the launches the other ranks' threads need to make the collectives it is waiting
     * for complete.
     */
    @Override
    public void pace(long timeoutNanos) {
        pack.throttle(rank, ++transactions, options.maxLead(), timeoutNanos);
    }

    /**
     * A peer whose work returned, or whose communicator closed, after fewer transactions than this
     * rank executed will never join the last ones: once they have been pending for a grace (as in
     * MPI mode), the watchdog aborts instead of waiting for its timeout.
     */
    @Override
    public String poll(long executed, long pendingNanos) {
        return pendingNanos < PENDING_GRACE_NANOS ? null : pack.closedBefore(rank, executed, pendingNanos);
    }

    /**
     * Tells the pack how far this rank got (see {@link #poll}); never waits: the launcher's end of
     * the work waits for the other ranks of the pack ({@link PackState#finish}), and a split's ranks
     * close their communicators whenever their work is done with them.
     */
    @Override
    public String closing(long executed, long timeoutNanos) {
        pack.closing(rank, executed);
        return null;
    }

    @Override
    public String explainAbort(String reason) {
        String cause = pack.cancellation();
        if (cause == null || reason.contains(cause)) {
            return reason;
        }
        // A reason the pack's failure already says (every rank's consistency-check verdict) once.
        return cause.contains(reason) ? cause : cause + "; then: " + reason;
    }

    /**
     * The pack's shared state is the channel: every rank's communicator gives its summary at once (a
     * snapshot; a stuck rank is not waited for), so the timeout is never needed.
     */
    @Override
    public List<RankSummary> summaries(RankSummary own, long timeoutNanos) {
        return pack.summaries();
    }

    /** The pack keeps the first diagnosis: every rank's abort is led by it (see {@link PackState#reason}). */
    @Override
    public Diagnosis diagnosed(Diagnosis diagnosis) {
        return pack.diagnosed(diagnosis);
    }

    /** The pack's lost ranks (see {@link PackState#lose}): with them, calls on an aborted communicator throw RankLostException. */
    @Override
    public List<Integer> lostRanks() {
        return pack.lostRanks();
    }

    @Override
    public Diagnosis diagnosis() {
        return pack.diagnosis();
    }

    /**
     * The pack fails with this rank's abort, unless the abort is the pack's loss of other ranks (see
     * {@link PackState#lose}), or, where the pack goes on without failed ranks: this rank's own thread
     * was interrupted (NCCL's wait ended for it; this rank is lost), or the diagnosis of a hang names
     * other ranks that never reached the call (they are lost, see {@link PackState#loseHung}).
     */
    @Override
    public void aborting(String reason) {
        failOrLose(reason);
        if (Thread.currentThread() == owner) {
            // This rank failed in its own call (a CUDA or NCCL error): its exception is about to reach user code.
            pack.awaitReadsDrained(rank);
        }
    }

    @Override
    public void beforeAbortedException(String reason) {
        // The abort may be this communicator's own (watchdog): make it the pack's failure (or loss) before
        // draining; this thread may get here before the aborting thread reaches aborting().
        failOrLose(reason);
        pack.awaitReadsDrained(rank);
    }

    /** This rank's abort for {@code reason} fails the pack, or is a loss (see {@link #aborting}). */
    private void failOrLose(String reason) {
        if (pack.abortedForLoss()) {
            return;
        }
        if (owner.isInterrupted()) {
            pack.lose(rank, failure(reason));
        } else if (!pack.loseHung(rank, pack.diagnosis())) {
            pack.fail(rank, failure(reason));
        }
    }

    /** This rank's failure, as the pack reports it (join() rethrows the first): the verdict first, when there is one. */
    private CommunicatorAbortedException failure(String reason) {
        Diagnosis diagnosis = pack.diagnosis();
        return new CommunicatorAbortedException(Diagnoses.lead(diagnosis, "communicator of rank " + rank + " aborted: "
                + reason), null, diagnosis);
    }

    @Override
    public void closed(boolean aborted) {
        // A failed pack: this rank's thread (and with it ThreadsPack.join) ends only after every
        // copy from or into buffers that user code may free once the pack is gone.
        pack.awaitReadsDrained(rank);
        if (pack.isChild()) {
            // What the launcher does for the pack's own communicators when a rank's work ends.
            pack.finished(rank);
            pack.leave();
        }
    }
}
