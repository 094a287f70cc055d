package dev.jnccl;

import dev.jnccl.cuda.CudaStream;
import dev.jnccl.internal.Deadlines;
import dev.jnccl.internal.Resources;
import dev.jnccl.spi.Diagnoses;
import dev.jnccl.spi.Membership;
import dev.jnccl.spi.RankParts;
import java.util.List;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * How one {@link Communicator} splits, aborts, retires and closes: the procedures behind those
 * public calls, over the communicator's {@link CommState}. The abort tells the launcher (which
 * releases the other ranks) and is bounded; the close is bounded and falls back to the abort; a
 * retire is the abort of a communicator replaced by a shrink, without the launcher's failure
 * handling. Children (communicators split from this one) are aborted and closed with it.
 */
final class Lifecycle {
    private static final Logger LOG = LoggerFactory.getLogger(Communicator.class);

    private final Communicator self;
    private final CommState state;
    private final RankParts parts;
    private final NcclComm comm;
    private final ReentrantLock nativeLock;
    private final Forensics forensics;
    private final FlightRecorder recorder;
    private final TransactionLog log;
    private final Registrations registrations;
    /** The launcher's lost ranks: an abort for them leaves the children without them whole. */
    private final LostRanks losses;
    /** Live communicators split from this one; closed before this one. */
    private final Children children;
    /** The watchdog, made after this part (it aborts through it): null when it is off. */
    private final Supplier<Watchdog> watchdog;
    /** The CUDA stream and events of the communicator, released last. */
    private final List<AutoCloseable> cudaResources;

    Lifecycle(Communicator self, CommState state, RankParts parts, NcclComm comm, ReentrantLock nativeLock,
              Forensics forensics, FlightRecorder recorder, TransactionLog log, Registrations registrations,
              LostRanks losses, Supplier<Watchdog> watchdog, List<AutoCloseable> cudaResources) {
        this.self = self;
        this.state = state;
        this.parts = parts;
        this.comm = comm;
        this.nativeLock = nativeLock;
        this.forensics = forensics;
        this.recorder = recorder;
        this.log = log;
        this.registrations = registrations;
        this.losses = losses;
        this.children = new Children(state.monitor());
        this.watchdog = watchdog;
        this.cudaResources = cudaResources;
    }

    // ---------------------------------------------------------------- split

    /** {@link Communicator#split}: the host exchange of colors and keys, NCCL's split, the child. */
    Optional<Communicator> split(int color, int key) {
        self.requireUsable("split");
        nativeLock.lock();
        try {
            log.requireNoneOpen("split");
        } finally {
            nativeLock.unlock();
        }
        List<Integer> members = Children.members(self.onHost(Forensics.SPLIT, () -> parts.host().allGather(
                Children.colorAndKey(color, key), Deadlines.toNanos(self.options().initTimeout()))), color);
        int childRank = members.indexOf(self.rank());
        parts.events().beforeSplit(color, key);
        NcclComm childComm = splitNccl(color, key, childRank, members.size());
        if (childComm == null) {
            return Optional.empty();
        }
        Communicator child;
        try {
            Membership membership = new Membership(self, color, key, childRank, members);
            RankParts childParts = Objects.requireNonNull(parts.host().split(membership),
                    "split: the launcher made no parts");
            child = Communicator.member(membership, childComm, childParts);
        } catch (RuntimeException | Error e) {
            childComm.abort();
            throw e;
        }
        Communicator.attach(child);
        synchronized (state.monitor()) {
            if (state.isOpen()) {
                children.add(child, members);
                return Optional.of(child);
            }
        }
        child.close();
        self.requireUsable("split");
        throw new IllegalStateException("split: communicator of rank " + self.rank()
                + " was closed during the split");
    }

    /**
     * NCCL's split of this communicator (null for a negative color), bounded by the init timeout; a
     * failure aborts this communicator (its state is unknown), one caused by an abort from another
     * thread says so.
     */
    private NcclComm splitNccl(int color, int key, int childRank, int childSize) {
        nativeLock.lock();
        try {
            self.requireUsable("split");
            return comm.split(color, key, childRank, childSize, self.options().initTimeout(),
                    parts.failures()::cancellation, new ReentrantLock());
        } catch (RuntimeException e) {
            if (state.get() == CommState.State.ABORTED && !(e instanceof IllegalArgumentException)) {
                // Aborted by another thread (a failed peer of the pack, the watchdog) while NCCL split:
                // say why, as every other call after an abort does.
                throw self.abortedDuring("split (color " + color + ", key " + key + ")", e);
            }
            self.abortHoldingLock("split (color " + color + ", key " + key + ") failed: " + e.getMessage());
            throw e;
        } finally {
            nativeLock.unlock();
        }
    }

    /** A child closed: it is no longer closed with this one. */
    void removeChild(Communicator child) {
        children.remove(child);
    }

    // ---------------------------------------------------------------- abort and retire

    /**
     * The watchdog's abort: diagnosed first (see {@link Diagnosis}), so that the verdict leads the
     * reason on every rank; not for a thread interrupted inside NCCL, whose own interrupt is the cause.
     */
    void abortDiagnosed(String reason) {
        Diagnosis made = null;
        if (!reason.startsWith("watchdog: " + Watchdog.INTERRUPTED_IN_NCCL)) {
            try {
                made = forensics.diagnose(reason);
            } catch (RuntimeException e) {
                LOG.warn("rank {}: the diagnosis of the abort failed; aborting without it", self.rank(), e);
            }
        }
        abort(reason, made);
    }

    /**
     * {@link Communicator#abort(String)} with the diagnosis that leads the reason: the one given, else
     * the one the launcher knows (a peer's), else none.
     */
    void abort(String reason, Diagnosis given) {
        Objects.requireNonNull(reason, "abort: reason is null");
        Diagnosis known = given != null ? given : parts.failures().diagnosis();
        String explained = Diagnoses.lead(known, parts.failures().explainAbort(reason));
        RankSummary before = forensics.beforeAbort();
        if (!state.abort(explained, known)) {
            return;
        }
        forensics.aborted(before, explained, known); // before NCCL's abort, which may hang or end the process
        LOG.error("rank {} (device {}): aborting communicator: {}\n  flight recorder, {}", self.rank(), self.device(),
                explained, recorder.dump());
        Events.Abort.record(self.rank(), explained);
        // First release threads the host side keeps waiting (barriers): one of them may hold the lock.
        try {
            parts.failures().aborting(explained);
        } catch (RuntimeException e) {
            LOG.warn("rank {}: the host side failed while aborting", self.rank(), e);
        }
        // After the launcher has decided whether the abort is a loss (a hang's diagnosis may make it one):
        // aborted for lost ranks, a child without them is whole and goes on (see Children.reachedBy).
        for (Communicator child : children.reachedBy(losses.lost())) {
            child.lifecycle().abort("the communicator it was split from (rank " + self.rank() + ") was aborted: "
                    + explained, known);
        }
        String abandoned = comm.abort(); // bounded: see NcclComm's bounded abort
        if (abandoned != null) {
            state.abandoned(abandoned); // what the calls that find it aborted from now on report
        }
        try {
            parts.failures().aborted(state.reason());
        } catch (RuntimeException e) {
            LOG.warn("rank {}: the host side failed after the abort", self.rank(), e);
        }
    }

    /** See {@link Communicator#retire(String, List)}. */
    void retire(String reason, List<Integer> excluded) {
        if (!state.retire(reason)) {
            return;
        }
        for (Communicator child : children.reachedBy(excluded)) {
            child.retire("the communicator it was split from (rank " + self.rank() + ") was " + reason);
        }
        LOG.info("rank {} (device {}): communicator retired: {}", self.rank(), self.device(), reason);
        String abandoned = comm.abort();
        if (abandoned != null) {
            state.abandoned(abandoned);
        }
    }

    // ---------------------------------------------------------------- close

    /** Closes the children (bounded and idempotent like this one), then this communicator itself. */
    void close() {
        for (Communicator child : children.live()) {
            child.close();
        }
        int before = forensics.enter(Forensics.CLOSE);
        try {
            closeSelf();
        } finally {
            forensics.exit(before);
            self.parent().ifPresent(parent -> parent.lifecycle().removeChild(self));
        }
    }

    private void closeSelf() {
        CommunicatorOptions options = self.options();
        long deadline = Deadlines.deadline(options.closeTimeout());
        Watchdog monitor = watchdog.get();
        if (monitor != null) {
            monitor.stop();
        }
        // A thread held inside NCCL (blocking mode, a peer gone) is ended by an abort.
        if (!comm.lockForClose(options.closeTimeout(), () -> self.abort("close: another thread of rank " + self.rank()
                + " was still inside a call of this communicator after " + Deadlines.toMillis(options.closeTimeout())
                + " ms (CommunicatorOptions.closeTimeout)"))) {
            state.close();
            return;
        }
        try {
            if (state.get() == CommState.State.OPEN) {
                finalizeOrAbort(deadline, self.stream());
            } else if (state.get() == CommState.State.REVOKED) {
                retire("closed after it was revoked", List.of()); // NCCL's work is revoked: nothing to finalize
            }
            state.close();
            releaseAll();
        } finally {
            nativeLock.unlock();
        }
    }

    /**
     * The bounded close of an open communicator: the launcher first learns whether the other ranks
     * are closing too (MPI mode ends a job whose ranks wait for one that closed early instead of
     * hanging), then NCCL finalizes and destroys; either failing (or the deadline) aborts instead.
     */
    private void finalizeOrAbort(long deadline, CudaStream stream) {
        String failure = parts.events().closing(log.executed(), Deadlines.remainingNanos(deadline));
        if (failure == null) {
            failure = joinReplays(stream);
        }
        if (failure == null) {
            failure = comm.finalizeAndDestroy(stream, deadline, self.options().closeTimeout());
        }
        if (failure != null) {
            LOG.warn("rank {}: {}; aborting instead", self.rank(), failure);
            self.abort(failure);
        }
    }

    /** The comms stream waits for the replays launched elsewhere, so that the close's drain covers them; {@return null, or why not} */
    private String joinReplays(CudaStream stream) {
        try {
            recorder.joinReplays(stream);
            return null;
        } catch (RuntimeException e) {
            return "close: the comms stream could not wait for the last graph replays: " + e.getMessage();
        }
    }

    /** After the finalize or the abort: what the communicator held, each release guarded (close always ends). */
    private void releaseAll() {
        comm.closeArena();
        registrations.dropAll();
        recorder.closeEvents();
        try {
            parts.transport().close();
        } catch (RuntimeException e) {
            LOG.warn("rank {}: closing the transport failed", self.rank(), e);
        }
        try {
            parts.events().closed(state.reason() != null);
        } catch (RuntimeException e) {
            LOG.warn("rank {}: closing the host side failed", self.rank(), e);
        }
        Resources.closeAll(cudaResources, null, LOG);
    }
}
