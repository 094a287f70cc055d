package dev.jnccl;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import dev.jnccl.bindings.NcclConfigs;
import dev.jnccl.bindings.NcclBufferCalls;
import dev.jnccl.bindings.NcclElasticCalls;
import dev.jnccl.bindings.NcclRedOps;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.bindings.nccl.ncclConfig_t;
import dev.jnccl.cuda.CudaException;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.internal.Backoff;
import dev.jnccl.internal.Deadlines;
import dev.jnccl.internal.Native;
import dev.jnccl.spi.Command.Function;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One rank's NCCL communicator handle(s) and every call made on them: init and its bounded wait,
 * groups, collectives, send/recv, asynchronous-error polling, abort, finalize and destroy.
 * {@link Communicator} holds the policy (state machine, validation) and calls this, as
 * {@link CommandRunner} does for a transaction's commands.
 *
 * <p><b>Modes</b> ({@link CommunicatorMode}). {@code NON_BLOCKING}: one non-blocking communicator
 * does everything. {@code BLOCKING_SPLIT}: a non-blocking <i>parent</i> is created (so init is
 * bounded and abortable), then split into a blocking <i>child</i> with the same ranks
 * ({@code splitShare = 1}: the child reuses the parent's proxy, streams and abort flag), and all
 * work runs on the child. NCCL 2.28 runs the split as a job of the parent's (non-blocking) group:
 * {@code ncclCommSplit} returns with the child handle still NULL, and writes it only when the
 * parent's asynchronous state leaves {@code ncclInProgress}; hence the output slot lives in this
 * object's arena, and the parent is polled before the child is read.
 *
 * <p><b>Locking.</b> The caller holds {@link #lock()} for every call except {@link #abort}; the
 * waits for {@code ncclInProgress} release it while they back off so that abort and the watchdog
 * can get in. Abort takes it too, but gives up after a grace period: in {@code BLOCKING_SPLIT} mode
 * a thread can be held inside a blocking NCCL call (waiting for a dead peer), and only
 * {@code ncclCommAbort}, which first raises NCCL's abort flag, lets it return.
 *
 * <p><b>Bounded abort.</b> {@code ncclCommAbort} itself can hang (it waits for NCCL's kernels,
 * proxy thread and connections to wind down). It runs on a daemon thread ({@link BoundedAbort}),
 * and its waiters give up after {@link #abortBound}: the communicator is then <i>abandoned</i>.
 * Its handles are gone from this object (nothing calls NCCL on them again, nothing destroys them)
 * and the native memory that thread may still read is never freed while it has not returned.
 */
final class NcclComm {
    private static final Logger LOG = LoggerFactory.getLogger(NcclComm.class);
    private static final int SUCCESS = Nccl.ncclSuccess();
    private static final int IN_PROGRESS = Nccl.ncclInProgress();
    /** How long abort waits for a thread inside NCCL to let go of the lock before it aborts anyway. */
    private static final long ABORT_LOCK_GRACE_MILLIS = 1000;
    /** The pause between two polls of NCCL's asynchronous state in init, split and finalize. */
    private static final long POLL_NANOS = 200_000;
    /**
     * The least time an abort is waited for, whatever {@link CommunicatorOptions#closeTimeout()}
     * says (1 ns there means "do not wait for the finalize"): a healthy ncclCommAbort frees NCCL's
     * buffers and joins its proxy thread, which takes up to a second or so, and abandoning it would
     * leak a working communicator's GPU memory.
     */
    private static final Duration MIN_ABORT_BOUND = Duration.ofSeconds(5);
    /**
     * {@link #group}'s writes of {@link #callThread} and {@link #callStartedNanos}: release stores.
     * Their readers (the watchdog's poll, an abort's log line) look every interval, not in step with
     * the enqueue, so the four full fences per enqueue that volatile stores cost would order nothing
     * they rely on; the lock's release after the enqueue drains the stores anyway.
     */
    private static final VarHandle CALL_THREAD;
    private static final VarHandle CALL_STARTED_NANOS;

    static {
        try {
            MethodHandles.Lookup lookup = MethodHandles.lookup();
            CALL_THREAD = lookup.findVarHandle(NcclComm.class, "callThread", Thread.class);
            CALL_STARTED_NANOS = lookup.findVarHandle(NcclComm.class, "callStartedNanos", long.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final int rank;
    private final int worldSize;
    private final int device;
    private final CommunicatorMode mode;
    /** The ncclConfig_t tuning of every communicator this one creates (init, its blocking child, splits). */
    private final CommunicatorOptions tuning;
    private final ReentrantLock lock;
    /**
     * Native memory that must outlive asynchronous NCCL jobs (the split's output slot) and the abort
     * (which reads the slot); closed last, by {@link #closeArena}, and never under an abort that has
     * not returned.
     */
    private final Arena arena = Arena.ofShared();
    /** Serializes the arena's close (the caller's and the abort thread's, see {@link #closeArena}). */
    private final Object arenaClose = new Object();
    private final MemorySegment asyncErrorSlot;
    private final MemorySegment childSlot;
    /**
     * Held around each finalize and destroy of the handles and while an abort takes them (with the
     * fields that name them): an abort from another thread while the lock's holder closes (abort
     * under the holder) then never hands NCCL a communicator the close is finalizing or destroying,
     * nor destroys one the close is using; whichever comes second finds the fields cleared. The
     * abort's ncclCommAbort calls run after, on handles nobody else can reach any more: never held
     * across a wait, nor across an abort that may not return.
     */
    private final Object handleUse = new Object();
    /** The abort of the handles, once they were taken for it (under handleUse); null before. */
    private volatile BoundedAbort aborting;

    /** The non-blocking communicator (both modes); null once aborted or destroyed. */
    private volatile MemorySegment parent;
    /** The blocking child of BLOCKING_SPLIT; null in NON_BLOCKING mode and once aborted or destroyed. */
    private volatile MemorySegment child;
    /** System.nanoTime() when the current (possibly blocking) enqueue into NCCL began, 0 when none runs. */
    private volatile long callStartedNanos;
    /** The thread inside the enqueue that {@link #callStartedNanos} times, or null. */
    private volatile Thread callThread;
    /**
     * The pre-multiplied sum operators made on the work communicator, by data type and scalar (the
     * factor as NCCL reads it): made at first use, destroyed before the work communicator is
     * finalized, forgotten once it is aborted. Under the lock.
     */
    private final Map<PreMulSumKey, Integer> preMulSums = new HashMap<>();
    /**
     * The ncclCommRegister handles not yet deregistered, on the work communicator, once per
     * registration (NCCL counts a range registered twice under one handle). Under the lock.
     */
    private final List<Long> registrations = new ArrayList<>();

    private record PreMulSumKey(DType dtype, long scalar) {}

    private NcclComm(int rank, int worldSize, int device, CommunicatorOptions tuning, ReentrantLock lock) {
        this.rank = rank;
        this.worldSize = worldSize;
        this.device = device;
        this.mode = tuning.mode();
        this.tuning = tuning;
        this.lock = lock;
        this.asyncErrorSlot = arena.allocate(JAVA_INT);
        this.childSlot = arena.allocate(ADDRESS);
    }

    /**
     * Creates this rank's communicator(s) on the calling thread's current device and waits until
     * every rank has joined, up to {@code timeout} in total (init and, in {@code BLOCKING_SPLIT}
     * mode, the split), or until {@code cancellation} gives a reason. On failure nothing is left.
     *
     * @throws NcclException                when NCCL refuses
     * @throws CommunicatorAbortedException at the deadline or on cancellation
     */
    static NcclComm init(UniqueId id, int rank, int worldSize, int device, CommunicatorOptions options,
                                Duration timeout, Supplier<String> cancellation, ReentrantLock lock) {
        return make(id, false, rank, worldSize, device, options, timeout, cancellation, lock);
    }

    /**
     * A new rank's communicator of a grow: {@code ncclCommGrow(NULL, worldSize, id, rank, ...)}
     * with the id that the existing rank 0 got from {@code ncclCommGetUniqueId}; otherwise as
     * {@link #init} (the wait, the deadline, what a failure leaves).
     */
    static NcclComm joinGrow(UniqueId id, int rank, int worldSize, int device, CommunicatorOptions options,
                             Duration timeout, Supplier<String> cancellation, ReentrantLock lock) {
        return make(id, true, rank, worldSize, device, options, timeout, cancellation, lock);
    }

    private static NcclComm make(UniqueId id, boolean grow, int rank, int worldSize, int device,
                                 CommunicatorOptions options, Duration timeout, Supplier<String> cancellation,
                                 ReentrantLock lock) {
        NcclComm comm = new NcclComm(rank, worldSize, device, options, lock);
        try {
            comm.initialize(id, grow, timeout, cancellation);
            return comm;
        } catch (RuntimeException e) {
            comm.abortHandles();
            comm.closeArena();
            throw e;
        }
    }

    private void initialize(UniqueId id, boolean grow, Duration timeout, Supplier<String> cancellation) {
        long deadline = Deadlines.deadline(timeout);
        String function = grow ? "ncclCommGrow" : "ncclCommInitRankConfig";
        try (Arena call = Arena.ofConfined()) {
            MemorySegment config = config(call, 0);
            // ncclCommGrow's job stores the new handle into newcomm again when it ends, after the call
            // returned (NCCL 2.29+): that slot, and the id it is given by pointer, live as long as this
            // communicator, as a split's do
            MemorySegment out = grow ? arena.allocate(ADDRESS) : call.allocate(ADDRESS);
            int result = grow
                    ? NcclElasticCalls.ncclCommGrow(MemorySegment.NULL, worldSize, NcclTypes.segment(id, arena), rank,
                            out, config)
                    : Nccl.ncclCommInitRankConfig(out, worldSize, NcclTypes.segment(id, call), rank, config);
            parent = nullToNull(out.get(ADDRESS, 0));
            if (result != SUCCESS && result != IN_PROGRESS) {
                throw failure(result, function, parent);
            }
        }
        awaitInit(parent, function, deadline, timeout, cancellation, "for the other ranks to join");
        splitBlocking(deadline, timeout, cancellation);
    }

    /** BLOCKING_SPLIT mode: the blocking child of the (ready) non-blocking parent; nothing otherwise. */
    private void splitBlocking(long deadline, Duration timeout, Supplier<String> cancellation) {
        if (mode != CommunicatorMode.BLOCKING_SPLIT) {
            return;
        }
        try (Arena call = Arena.ofConfined()) {
            MemorySegment config = config(call, 1);
            ncclConfig_t.splitShare(config, 1);
            childSlot.set(ADDRESS, 0, MemorySegment.NULL);
            // One colour, key = rank: the child has the parent's ranks in the parent's order.
            int result = Nccl.ncclCommSplit(parent, 0, rank, childSlot, config);
            if (result != SUCCESS && result != IN_PROGRESS) {
                throw failure(result, "ncclCommSplit", parent);
            }
        }
        // The split is a job of the parent's non-blocking group: the child handle appears once the
        // parent's asynchronous state has left ncclInProgress (seen on NCCL 2.28.3: ncclSuccess
        // returned with the child still NULL).
        awaitInit(parent, "ncclCommSplit", deadline, timeout, cancellation,
                "for the other ranks to split into the blocking communicator");
        MemorySegment handle = awaitPublished(childSlot, deadline, timeout, cancellation,
                "for ncclCommSplit to publish the blocking communicator");
        child = handle;
        awaitInit(handle, "ncclCommSplit", deadline, timeout, cancellation,
                "for the blocking communicator to become ready");
    }

    /**
     * ncclCommSplit of this communicator's non-blocking handle (every rank of this communicator
     * calls it): the ranks with the same non-negative {@code color}, ordered by {@code key}, get a
     * new communicator in this one's mode (in {@code BLOCKING_SPLIT} mode, split once more into its
     * blocking child); a negative color is NCCL_SPLIT_NOCOLOR and gives null. Waits, up to
     * {@code timeout} or until {@code cancellation} gives a reason, for the other ranks; while it
     * backs off it releases this communicator's lock (held by the caller), so an abort can get in,
     * and the split then ends with {@link CommunicatorAbortedException}. On failure nothing is left;
     * a failure while NCCL may still be splitting (deadline, cancellation) aborts this communicator
     * too, which ends NCCL's split job before its output slot is freed (the caller aborts anyway).
     *
     * @param childRank  this rank in the new communicator (as NCCL orders: by key, then by rank)
     * @param childSize  the number of ranks with this color
     * @param childLock  the lock of the new communicator's owner
     * @throws NcclException                when NCCL refuses
     * @throws CommunicatorAbortedException at the deadline, on cancellation, or when this one is aborted
     */
    NcclComm split(int color, int key, int childRank, int childSize, Duration timeout,
                          Supplier<String> cancellation, ReentrantLock childLock) {
        return derive("ncclCommSplit", into -> startSplit(color, key, into), color >= 0, childRank, childSize,
                timeout, cancellation, childLock);
    }

    /**
     * ncclCommShrink of this communicator's non-blocking handle with {@code flags}: the
     * survivors (every rank not in {@code excluded}, each of which calls it) get a new communicator
     * in this one's mode, ranked in the order of their ranks here; the excluded ranks never call.
     * The wait, the lock, the deadline and what a failure leaves are {@link #split}'s.
     *
     * @param excluded the excluded ranks (checked by the caller)
     * @param flags    {@code NCCL_SHRINK_DEFAULT}, or {@code NCCL_SHRINK_ABORT} (NCCL's pending work on
     *                 this communicator is aborted first: for one in error)
     * @param newRank  this rank among the survivors
     * @param newSize  the number of survivors
     * @throws NcclException                when NCCL refuses
     * @throws CommunicatorAbortedException at the deadline, on cancellation, or when this one is aborted
     */
    NcclComm shrink(int[] excluded, int flags, int newRank, int newSize, Duration timeout,
                    Supplier<String> cancellation, ReentrantLock newLock) {
        return derive("ncclCommShrink", into -> startShrink(excluded, flags, into), true, newRank, newSize, timeout,
                cancellation, newLock);
    }

    /**
     * ncclCommGrow of this communicator's non-blocking handle (every rank of this communicator calls
     * it, with rank -1: it keeps its rank among {@code newSize}); the new ranks join with the same
     * {@code id} ({@link #joinGrow}). NCCL wants the id from the coordinator only (the rank that got
     * it from {@link #growId}), the other existing ranks pass NULL: {@code passId} says whether this
     * rank passes it. {@code started} runs once NCCL accepted the call, before the wait: new ranks
     * must not call before the existing ones (NCCL fails a new rank that arrives first). The wait, the
     * lock, the deadline and what a failure leaves are {@link #split}'s.
     *
     * @throws NcclException                when NCCL refuses
     * @throws CommunicatorAbortedException at the deadline, on cancellation, or when this one is aborted
     */
    NcclComm grow(UniqueId id, boolean passId, int newSize, Duration timeout, Supplier<String> cancellation,
                  ReentrantLock newLock, Runnable started) {
        return derive("ncclCommGrow", into -> {
            MemorySegment source = startGrow(id, passId, newSize, into);
            started.run();
            return source;
        }, true, rank, newSize, timeout, cancellation, newLock);
    }

    /** Starts NCCL's grow on this communicator's non-blocking handle; the id lives in {@code into}'s arena. */
    private MemorySegment startGrow(UniqueId id, boolean passId, int newSize, NcclComm into) {
        MemorySegment source = parent;
        if (source == null) {
            throw new CommunicatorAbortedException("ncclCommGrow: the communicator of rank " + rank + " was aborted");
        }
        try (Arena call = Arena.ofConfined()) {
            MemorySegment config = into.config(call, 0);
            MemorySegment unique = passId ? NcclTypes.segment(id, into.arena) : MemorySegment.NULL;
            into.childSlot.set(ADDRESS, 0, MemorySegment.NULL);
            int started = NcclElasticCalls.ncclCommGrow(source, newSize, unique, -1, into.childSlot, config);
            if (started != SUCCESS && started != IN_PROGRESS) {
                throw failure(started, "ncclCommGrow", source);
            }
        }
        return source;
    }

    /**
     * ncclCommGetUniqueId of this communicator's non-blocking handle: the id of its next grow (NCCL
     * asks for one call, on one rank, before each grow, with nothing outstanding). Caller holds the lock.
     *
     * @throws NcclException                when NCCL refuses
     * @throws CommunicatorAbortedException when this one is aborted
     */
    UniqueId growId() {
        MemorySegment source = parent;
        if (source == null) {
            throw new CommunicatorAbortedException("ncclCommGetUniqueId: the communicator of rank " + rank
                    + " was aborted");
        }
        try (Arena call = Arena.ofConfined()) {
            MemorySegment out = call.allocate(UniqueId.BYTES);
            int result = NcclElasticCalls.ncclCommGetUniqueId(source, out);
            if (result != SUCCESS) {
                throw failure(result, "ncclCommGetUniqueId", source);
            }
            return UniqueId.fromBytes(out.toArray(java.lang.foreign.ValueLayout.JAVA_BYTE));
        }
    }

    /**
     * A new communicator made by a job of NCCL on this communicator's non-blocking handle (split,
     * shrink): {@code start} starts the job with the new communicator's config and output slot and
     * returns the handle it runs on; the job is awaited on that handle, then (for a {@code member})
     * the new handle is awaited in the slot and adopted (see {@link #split}).
     */
    private NcclComm derive(String function, java.util.function.Function<NcclComm, MemorySegment> start,
                            boolean member, int newRank, int newSize, Duration timeout, Supplier<String> cancellation,
                            ReentrantLock newLock) {
        long deadline = Deadlines.deadline(timeout);
        NcclComm result = new NcclComm(newRank, newSize, device, tuning, newLock);
        boolean settled = true; // whether no job of NCCL can still write result's slot
        boolean done = false;
        try {
            MemorySegment source = start.apply(result);
            settled = false;
            int status = awaitDerivingJob(function, deadline, timeout, cancellation);
            settled = true;
            if (status != SUCCESS) {
                // The handle polled was source: a job only ever sees parent cleared, never replaced.
                throw failure(status, function, source);
            }
            if (!member) {
                return null;
            }
            MemorySegment handle = awaitPublished(result.childSlot, deadline, timeout, cancellation,
                    "for " + function + " to publish the new communicator");
            result.adoptSplit(handle, function, deadline, timeout, cancellation);
            done = true;
            return result;
        } finally {
            if (!done) {
                if (!settled && !abortHandles()) {
                    // NCCL joins the job in the abort, which has not returned: result's slot may
                    // still be written, so result is discarded once (if ever) it does.
                    aborting.afterReturn(result::discardSplit);
                } else {
                    result.discardSplit(); // the job has ended: result's slot is final
                }
            }
        }
    }

    /**
     * Starts NCCL's shrink job of this communicator's non-blocking handle, with {@code into}'s config
     * and output slot; returns the handle shrunk. The exclude list lives in {@code into}'s arena: the
     * job may read it after the call returns. When it throws, no job runs.
     */
    private MemorySegment startShrink(int[] excluded, int flags, NcclComm into) {
        MemorySegment source = parent;
        if (source == null) {
            throw new CommunicatorAbortedException("ncclCommShrink: the communicator of rank " + rank
                    + " was aborted");
        }
        try (Arena call = Arena.ofConfined()) {
            MemorySegment config = into.config(call, 0);
            MemorySegment list = into.arena.allocateFrom(JAVA_INT, excluded);
            into.childSlot.set(ADDRESS, 0, MemorySegment.NULL);
            int started = NcclElasticCalls.ncclCommShrink(source, list, excluded.length, into.childSlot, config, flags);
            if (started != SUCCESS && started != IN_PROGRESS) {
                throw failure(started, "ncclCommShrink", source);
            }
        }
        return source;
    }

    /**
     * ncclCommRevoke (flags 0) of the work communicator and, in {@code BLOCKING_SPLIT} mode, of its
     * non-blocking parent: NCCL ends the work in flight and refuses new work; shrink, abort and
     * destroy still work. A non-blocking handle's revoke is waited for (lock released while backing
     * off) until it leaves ncclInProgress, before {@code deadline}. Caller holds the lock.
     *
     * @throws NcclException                when NCCL refuses the revoke of the work communicator
     * @throws CommunicatorAbortedException when aborted meanwhile or past the deadline
     */
    void revoke(long deadline, Duration timeout) {
        MemorySegment work = work("ncclCommRevoke");
        revokeOne(work, deadline, timeout);
        MemorySegment nonBlocking = parent;
        if (nonBlocking != null && !nonBlocking.equals(work)) {
            try {
                revokeOne(nonBlocking, deadline, timeout);
            } catch (NcclException e) {
                LOG.warn("rank {}: ncclCommRevoke of the non-blocking communicator failed (the work communicator is"
                        + " revoked): {}", rank, e.getMessage());
            }
        }
    }

    /**
     * One handle's revoke: a refusal throws; an accepted revoke of a non-blocking handle is awaited
     * until NCCL's state leaves ncclInProgress (whatever it then reports: a revoked communicator's
     * state is NCCL's business, and what follows is a shrink, an abort or a close).
     */
    private void revokeOne(MemorySegment handle, long deadline, Duration timeout) {
        int result = NcclElasticCalls.ncclCommRevoke(handle, 0);
        if (result != SUCCESS && result != IN_PROGRESS) {
            throw failure(result, "ncclCommRevoke", handle);
        }
        long spins = 0;
        while (result == IN_PROGRESS) {
            if (Deadlines.passed(deadline)) {
                throw new CommunicatorAbortedException("revoke: ncclCommRevoke of rank " + rank + " did not finish"
                        + " within " + Deadlines.toMillis(timeout) + " ms (CommunicatorOptions.closeTimeout)");
            }
            pauseUnlocked(spins++);
            if (parent == null) {
                throw new CommunicatorAbortedException("revoke: the communicator of rank " + rank
                        + " was aborted while NCCL revoked it");
            }
            result = asyncError(handle);
        }
    }

    /**
     * Starts NCCL's split job of this communicator's non-blocking handle, with {@code into}'s config
     * and output slot; returns the handle split. When it throws, no split job runs.
     */
    private MemorySegment startSplit(int color, int key, NcclComm into) {
        MemorySegment source = parent;
        if (source == null) {
            throw new CommunicatorAbortedException("ncclCommSplit: the communicator of rank " + rank
                    + " was aborted");
        }
        try (Arena call = Arena.ofConfined()) {
            MemorySegment config = into.config(call, 0);
            into.childSlot.set(ADDRESS, 0, MemorySegment.NULL);
            int started = Nccl.ncclCommSplit(source, color < 0 ? Nccl.NCCL_SPLIT_NOCOLOR() : color, key,
                    into.childSlot, config);
            if (started != SUCCESS && started != IN_PROGRESS) {
                throw failure(started, "ncclCommSplit", source);
            }
        }
        return source;
    }

    /**
     * Waits until this (non-blocking) communicator's asynchronous state has left ncclInProgress,
     * which ends the split job NCCL runs on it (as in init, the new handle is published then), and
     * returns that state: ncclSuccess or NCCL's error. Releases the lock while it backs off, so an
     * abort can get in. Throws while the job may still run: aborted meanwhile, deadline, cancellation.
     */
    private int awaitDerivingJob(String function, long deadline, Duration timeout, Supplier<String> cancellation) {
        long spins = 0;
        while (true) {
            MemorySegment handle = parent;
            if (handle == null) {
                throw new CommunicatorAbortedException(function + ": the communicator of rank " + rank
                        + " was aborted while NCCL made the new communicator");
            }
            int status = asyncError(handle);
            if (status != IN_PROGRESS) {
                return status;
            }
            // "split", "shrink": the call the other ranks make, as jnccl's users know it
            checkInitDeadline(deadline, timeout, cancellation, "for the other ranks to call "
                    + function.substring("ncclComm".length()).toLowerCase(java.util.Locale.ROOT));
            pauseUnlocked(spins++);
        }
    }

    /**
     * The handle a finished split job wrote into {@code slot}, waiting (polling, lock held) until
     * it appears; the wait is this communicator's, as are the messages of its deadline.
     */
    private MemorySegment awaitPublished(MemorySegment slot, long deadline, Duration timeout,
                                         Supplier<String> cancellation, String waitingFor) {
        MemorySegment handle = nullToNull(slot.get(ADDRESS, 0));
        while (handle == null) {
            checkInitDeadline(deadline, timeout, cancellation, waitingFor);
            Backoff.park(POLL_NANOS);
            handle = nullToNull(slot.get(ADDRESS, 0));
        }
        return handle;
    }

    /**
     * The new communicator of a split takes the {@code handle} published into its slot as its
     * non-blocking communicator, waits until it is ready and, in {@code BLOCKING_SPLIT} mode, splits
     * its blocking child.
     */
    private void adoptSplit(MemorySegment handle, String function, long deadline, Duration timeout,
                            Supplier<String> cancellation) {
        childSlot.set(ADDRESS, 0, MemorySegment.NULL);
        parent = handle;
        awaitInit(handle, function, deadline, timeout, cancellation,
                "for the new communicator to become ready");
        splitBlocking(deadline, timeout, cancellation);
    }

    /**
     * The new communicator of a failed split leaves nothing: a handle the (ended) split job
     * published but {@link #adoptSplit} did not take is taken, then every handle aborted and the
     * native memory closed.
     */
    private void discardSplit() {
        MemorySegment late = parent == null && arena.scope().isAlive()
                ? nullToNull(childSlot.get(ADDRESS, 0)) : null;
        if (late != null) {
            childSlot.set(ADDRESS, 0, MemorySegment.NULL);
            parent = late;
        }
        abortHandles();
        closeArena();
    }

    private void awaitInit(MemorySegment handle, String function, long deadline, Duration timeout,
                           Supplier<String> cancellation, String waitingFor) {
        while (true) {
            int status = asyncError(handle);
            if (status == SUCCESS) {
                return;
            }
            if (status != IN_PROGRESS) {
                throw failure(status, function, handle);
            }
            checkInitDeadline(deadline, timeout, cancellation, waitingFor);
            Backoff.park(POLL_NANOS);
        }
    }

    /**
     * A config for a communicator this object will own: {@code blocking}, and the options' tuning.
     * NCCL keeps the commName pointer (it does not copy it), so the name lives in this object's
     * arena, which lives as long as its handles. NCCL 2.28 refuses a minCTAs set with maxCTAs left
     * undefined (it compares it with NCCL_CONFIG_UNDEF_INT), so one bound set sets both, the other
     * at NCCL's default (1 and 64).
     */
    private MemorySegment config(Arena call, int blocking) {
        MemorySegment config = NcclConfigs.allocate(call);
        ncclConfig_t.blocking(config, blocking);
        int unset = CommunicatorOptions.NCCL_DEFAULT;
        if (tuning.minCTAs() != unset || tuning.maxCTAs() != unset) {
            ncclConfig_t.minCTAs(config, tuning.minCTAs() == unset ? 1 : tuning.minCTAs());
            ncclConfig_t.maxCTAs(config, tuning.maxCTAs() == unset ? 64 : tuning.maxCTAs());
        }
        if (tuning.cgaClusterSize() != unset) {
            ncclConfig_t.cgaClusterSize(config, tuning.cgaClusterSize());
        }
        if (!tuning.name().isEmpty()) {
            ncclConfig_t.commName(config, arena.allocateFrom(tuning.name()));
        }
        return config;
    }

    private void checkInitDeadline(long deadline, Duration timeout, Supplier<String> cancellation, String waitingFor) {
        String cancelled = cancellation.get();
        if (cancelled != null) {
            throw new CommunicatorAbortedException("init: rank " + rank + " of " + worldSize + " aborted: " + cancelled);
        }
        if (Thread.currentThread().isInterrupted()) {
            // The interrupt status stays set for the caller; the half-made communicator is aborted by it.
            throw new CommunicatorAbortedException("init: rank " + rank + " of " + worldSize + " (device " + device
                    + ") was interrupted while waiting " + waitingFor, new InterruptedException());
        }
        if (Deadlines.passed(deadline)) {
            throw new CommunicatorAbortedException("init: rank " + rank + " of " + worldSize + " (device " + device
                    + ") aborted after waiting " + Deadlines.toMillis(timeout) + " ms " + waitingFor
                    + " (CommunicatorOptions.initTimeout)");
        }
    }

    /** The lock that serializes calls on this communicator (shared with its owner). */
    ReentrantLock lock() {
        return lock;
    }

    CommunicatorMode mode() {
        return mode;
    }

    /** Whether the handles are gone (aborted or destroyed). */
    boolean isReleased() {
        return parent == null && child == null;
    }

    /**
     * The thread inside an enqueue, when it has been interrupted (for the watchdog), else null. An
     * interrupt cannot reach a thread inside a native call, and real NCCL may hold one there for as
     * long as its peers take to come (it connects ranks in the first collectives' ncclGroupEnd).
     */
    Thread interruptedCaller() {
        Thread thread = callThread;
        return thread != null && thread.isInterrupted() ? thread : null;
    }

    /** Nanos since the enqueue now inside NCCL began, or -1 when none is (for the watchdog). */
    long enqueueAgeNanos(long now) {
        long started = callStartedNanos;
        return started == 0 ? -1 : now - started;
    }

    // ---------------------------------------------------------------- work

    /**
     * Runs {@code body} (collective and point-to-point calls of this class) between ncclGroupStart
     * and ncclGroupEnd. The group is closed whatever happens; on a non-blocking communicator the
     * in-progress end is awaited.
     */
    void group(Runnable body) {
        MemorySegment work = work("ncclGroupStart");
        check(Nccl.ncclGroupStart(), "ncclGroupStart", work);
        boolean open = true;
        CALL_THREAD.setRelease(this, Thread.currentThread());
        CALL_STARTED_NANOS.setRelease(this, System.nanoTime());
        try {
            body.run();
            open = false;
            int result = Nccl.ncclGroupEnd();
            if (result == IN_PROGRESS) {
                awaitNotInProgress("ncclGroupEnd");
            } else {
                check(result, "ncclGroupEnd", work);
            }
        } finally {
            CALL_STARTED_NANOS.setRelease(this, 0L);
            CALL_THREAD.setRelease(this, (Thread) null);
            if (open) {
                Nccl.ncclGroupEnd(); // close it; the original failure is the one that matters
            }
        }
    }

    /**
     * One NCCL call of {@code function} (inside the open group): the table from the functions
     * commands run as to NCCL. Buffers are addresses, as NCCL takes them: no segment or tensor per call.
     *
     * @param send   the send buffer (0 where NCCL does not read one: a receive, a root-only source elsewhere)
     * @param recv   the receive buffer (0 where NCCL does not write one)
     * @param count  NCCL's count argument (per rank for the scattered and gathered collectives)
     * @param ncclOp the ncclRedOp_t of a reduction, else ignored
     * @param target the root of a rooted collective or the peer of a send or receive, else ignored
     */
    void call(Function function, long send, long recv, long count, DType dtype, int ncclOp, int target,
              CudaStream stream) {
        MemorySegment work = work(function.ncclName());
        int type = NcclTypes.of(dtype);
        MemorySegment s = stream.handle();
        int result = switch (function) {
            case ALL_REDUCE -> NcclBufferCalls.ncclAllReduce(send, recv, count, type, ncclOp, work, s);
            case REDUCE_SCATTER -> NcclBufferCalls.ncclReduceScatter(send, recv, count, type, ncclOp, work, s);
            case ALL_GATHER -> NcclBufferCalls.ncclAllGather(send, recv, count, type, work, s);
            case BROADCAST -> NcclBufferCalls.ncclBroadcast(send, recv, count, type, target, work, s);
            case REDUCE -> NcclBufferCalls.ncclReduce(send, recv, count, type, ncclOp, target, work, s);
            case GATHER -> NcclBufferCalls.ncclGather(send, recv, count, type, target, work, s);
            case SCATTER -> NcclBufferCalls.ncclScatter(send, recv, count, type, target, work, s);
            case ALL_TO_ALL -> NcclBufferCalls.ncclAlltoAll(send, recv, count, type, work, s);
            case SEND -> NcclBufferCalls.ncclSend(send, count, type, target, work, s);
            case RECV -> NcclBufferCalls.ncclRecv(recv, count, type, target, work, s);
        };
        check(result, function.ncclName(), work);
    }

    /**
     * The ncclRedOp_t of a pre-multiplied sum by {@code factor} for {@code dtype} tensors, made with
     * ncclRedOpCreatePreMulSum (host scalar) at its first use and kept until the communicator
     * ends: NCCL's operators are per communicator and data type. Caller holds the lock.
     */
    int preMulSum(DType dtype, double factor) {
        PreMulSumKey key = new PreMulSumKey(dtype, NcclTypes.scalarBits(dtype, factor));
        Integer known = preMulSums.get(key);
        if (known != null) {
            return known;
        }
        MemorySegment work = work("ncclRedOpCreatePreMulSum");
        try (Arena call = Arena.ofConfined()) {
            MemorySegment out = call.allocate(JAVA_INT);
            // NCCL copies sizeof(dtype) bytes: the low bytes of the little-endian long.
            MemorySegment scalar = call.allocate(JAVA_LONG);
            scalar.set(JAVA_LONG, 0, key.scalar());
            check(NcclRedOps.ncclRedOpCreatePreMulSum(out, scalar, NcclTypes.of(dtype),
                    NcclRedOps.SCALAR_HOST_IMMEDIATE, work), "ncclRedOpCreatePreMulSum", work);
            int op = out.get(JAVA_INT, 0);
            preMulSums.put(key, op);
            return op;
        }
    }

    /** ncclCommRegister of {@code bytes} at {@code address}; the handle (an address) for {@link #deregister}. Caller holds the lock. */
    long register(long address, long bytes) {
        MemorySegment work = work("ncclCommRegister");
        try (Arena call = Arena.ofConfined()) {
            MemorySegment out = call.allocate(ADDRESS);
            check(Nccl.ncclCommRegister(work, segment(address), bytes, out), "ncclCommRegister", work);
            long handle = out.get(ADDRESS, 0).address();
            registrations.add(handle);
            return handle;
        }
    }

    /**
     * ncclCommDeregister of a handle from {@link #register}; nothing once the communicator was
     * aborted (its registrations went with it) or for a handle already deregistered. Caller holds the lock.
     */
    void deregister(long handle) {
        if (!registrations.remove(Long.valueOf(handle)) || isReleased()) {
            return;
        }
        MemorySegment work = work("ncclCommDeregister");
        check(Nccl.ncclCommDeregister(work, segment(handle)), "ncclCommDeregister", work);
    }

    /**
     * Destroys the operators and deregisters the buffers still held on the work communicator
     * {@code work}, before it is finalized: after that NCCL would be given a destroyed
     * communicator. A failure is logged: the finalize that follows frees them anyway.
     */
    private void releaseUserState(MemorySegment work) {
        for (int op : preMulSums.values()) {
            warnIfFailed(NcclRedOps.ncclRedOpDestroy(op, work), "ncclRedOpDestroy");
        }
        preMulSums.clear();
        List<Long> handles = new ArrayList<>(registrations);
        registrations.clear();
        for (long handle : handles) {
            warnIfFailed(Nccl.ncclCommDeregister(work, segment(handle)), "ncclCommDeregister");
        }
    }

    /** {@return the handle of the communicator that runs the work, for tests that ask the emulation about it} */
    MemorySegment workHandle() {
        return work("workHandle");
    }

    /**
     * The asynchronous error of the communicator that runs the work, as a reason for an abort, or
     * null when there is none (still in progress counts as none). Caller holds the lock.
     */
    String asyncFailure() {
        MemorySegment work = child != null ? child : parent;
        if (work == null) {
            return null;
        }
        int status = asyncError(work);
        if (status == SUCCESS || status == IN_PROGRESS) {
            return null;
        }
        String last = Native.ncclLastError(work);
        return "NCCL reports asynchronous error " + status + " (" + Native.ncclErrorText(status) + ")"
                + (last.isBlank() ? "" : ": " + last);
    }

    /** Non-blocking communicator: waits (lock released while backing off) until the last call has finished. */
    private void awaitNotInProgress(String function) {
        long spins = 0;
        while (true) {
            MemorySegment handle = work(function);
            int status = asyncError(handle);
            if (status == SUCCESS) {
                return;
            }
            if (status != IN_PROGRESS) {
                throw failure(status, function, handle);
            }
            pauseUnlocked(spins++);
        }
    }

    /**
     * One back-off step of a wait for NCCL's asynchronous state, with the lock released (and taken
     * again before it returns) so that abort and the watchdog can get in meanwhile.
     */
    private void pauseUnlocked(long spins) {
        lock.unlock();
        try {
            Backoff.pause(spins);
        } finally {
            lock.lock();
        }
    }

    // ---------------------------------------------------------------- end of life

    /**
     * Waits for the comms stream to drain, then finalizes and destroys the communicator(s), all
     * before {@code deadlineNanos}. Returns null when done, or the reason why the caller must abort
     * instead (the deadline passed, or CUDA or NCCL failed). Caller holds the lock.
     *
     * <p>Why the blocking child may be finalized with a blocking call: after the stream drained,
     * NCCL's finalize of it ({@code src/init.cc}: commDestroySync) synchronizes NCCL's internal
     * streams, whose work finished with the comms stream, and stops this process's proxy thread;
     * destroy (commReclaim, commFree: "should not involve any sync among ranks") frees local
     * resources. Neither waits for a peer, so a dead or slow peer cannot hold close(). A child with
     * an asynchronous error is not finalized (its work may be stuck): the caller aborts.
     */
    String finalizeAndDestroy(CudaStream stream, long deadlineNanos, Duration timeout) {
        long spins = 0;
        try {
            while (!stream.isIdle()) {
                if (Deadlines.passed(deadlineNanos)) {
                    return "close: the comms stream still had work after " + Deadlines.toMillis(timeout)
                            + " ms (CommunicatorOptions.closeTimeout)";
                }
                if (Backoff.pauseOrInterrupted(spins++)) {
                    // An interrupted close ends promptly: the caller aborts instead of waiting on.
                    return "close: interrupted while the comms stream still had work";
                }
            }
            return finalizeAndDestroyIdle(deadlineNanos, timeout);
        } catch (CudaException | NcclException e) {
            return "close: " + e.getMessage();
        }
    }

    /** Finalizes and destroys the communicator(s) once the comms stream is idle; as {@link #finalizeAndDestroy}. */
    private String finalizeAndDestroyIdle(long deadlineNanos, Duration timeout) {
        String failed = finalizeAndDestroyChild();
        return failed != null ? failed : finalizeAndDestroyParent(deadlineNanos, timeout);
    }

    /**
     * BLOCKING_SPLIT mode: finalizes and destroys the blocking child with blocking calls (why that
     * cannot hang: {@link #finalizeAndDestroy}). Returns null when done or there is none, else why
     * the caller must abort instead.
     */
    private String finalizeAndDestroyChild() {
        synchronized (handleUse) {
            MemorySegment blocking = child;
            if (blocking == null) {
                return null;
            }
            int status = asyncError(blocking);
            if (status != SUCCESS) {
                return "close: the blocking communicator reports " + status + " (" + Native.ncclErrorText(status)
                        + ")";
            }
            releaseUserState(blocking);
            int result = Nccl.ncclCommFinalize(blocking);
            if (result != SUCCESS) {
                return "close: ncclCommFinalize of the blocking communicator failed: "
                        + failure(result, "ncclCommFinalize", blocking).getMessage();
            }
            child = null;
            result = Nccl.ncclCommDestroy(blocking);
            if (result != SUCCESS) {
                LOG.warn("rank {}: ncclCommDestroy of the blocking communicator returned {} ({})", rank, result,
                        Native.ncclErrorText(result));
            }
            return null;
        }
    }

    /**
     * Finalizes the non-blocking communicator, polling its asynchronous state (handleUse held only
     * around each poll, never across the pause) until it has left ncclInProgress, before
     * {@code deadlineNanos}; then destroys it. Returns null when done, else why the caller must abort.
     */
    private String finalizeAndDestroyParent(long deadlineNanos, Duration timeout) {
        MemorySegment handle;
        int result;
        synchronized (handleUse) {
            handle = parent;
            if (handle == null) {
                return ABORTED_MEANWHILE;
            }
            if (mode != CommunicatorMode.BLOCKING_SPLIT) {
                releaseUserState(handle);
            }
            result = Nccl.ncclCommFinalize(handle);
        }
        while (result == IN_PROGRESS) {
            if (Deadlines.passed(deadlineNanos)) {
                return "close: ncclCommFinalize did not finish within " + Deadlines.toMillis(timeout)
                        + " ms (CommunicatorOptions.closeTimeout)";
            }
            if (Thread.currentThread().isInterrupted()) {
                return "close: interrupted while ncclCommFinalize was in progress";
            }
            Backoff.park(POLL_NANOS);
            synchronized (handleUse) {
                if (parent != handle) {
                    return ABORTED_MEANWHILE;
                }
                result = asyncError(handle);
            }
        }
        return destroyFinalized(handle, result);
    }

    /**
     * Destroys the non-blocking communicator {@code handle} whose finalize ended with {@code finalized},
     * then closes the native memory. Returns null when done, else why the caller must abort.
     */
    private String destroyFinalized(MemorySegment handle, int finalized) {
        int result;
        synchronized (handleUse) {
            if (parent != handle) {
                return ABORTED_MEANWHILE;
            }
            if (finalized != SUCCESS) {
                return "close: ncclCommFinalize failed: " + failure(finalized, "ncclCommFinalize", handle).getMessage();
            }
            parent = null;
            result = Nccl.ncclCommDestroy(handle);
        }
        if (result != SUCCESS) {
            LOG.warn("rank {}: ncclCommDestroy returned {} ({})", rank, result, Native.ncclErrorText(result));
        }
        closeArenaNow();
        return null;
    }

    /** What close says when an abort from another thread took the handles while it finalized them. */
    private static final String ABORTED_MEANWHILE = "close: the communicator was aborted meanwhile";

    /**
     * ncclCommAbort of the child, then of the parent: work in flight ends, peers waiting for this
     * rank see it, every later call fails. Idempotent; any thread. Waits up to a grace period for the
     * lock; a thread that still holds it then is inside a blocking NCCL call, which NCCL's abort flag
     * (raised first by ncclCommAbort) ends, so the handles are aborted without the lock. The abort
     * itself is waited for up to {@link #abortBound} (see {@link #abortHandles}).
     *
     * @return null when the abort returned or goes on after an interrupt of this thread; else why
     *         it was abandoned, for the communicator's abort reason
     */
    String abort() {
        // Free lock: taken at once, interrupt or not (an interrupted rank aborting its own
        // communicator). Held: wait the grace, unless this thread is interrupted (a watchdog being
        // stopped), then abort under the holder at once.
        boolean locked = lock.tryLock();
        if (!locked && !Thread.currentThread().isInterrupted()) {
            try {
                locked = lock.tryLock(ABORT_LOCK_GRACE_MILLIS, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        try {
            if (!locked) {
                LOG.warn("rank {}: a thread is still inside NCCL after {} ms; aborting the communicator under it",
                        rank, ABORT_LOCK_GRACE_MILLIS);
            }
            abortHandles();
            if (locked) {
                closeArena();
            }
        } finally {
            if (locked) {
                lock.unlock();
            }
        }
        BoundedAbort run = aborting;
        return run != null && run.abandoned() ? abandonment(run) : null;
    }

    /**
     * How long a thread waits for ncclCommAbort: {@link CommunicatorOptions#closeTimeout()}, the
     * bound the user gave the end of the communicator's life (close aborts when it passes), but at
     * least {@link #MIN_ABORT_BOUND}.
     */
    private Duration abortBound() {
        Duration close = tuning.closeTimeout();
        return close.compareTo(MIN_ABORT_BOUND) < 0 ? MIN_ABORT_BOUND : close;
    }

    /** Whether an abort of this communicator was abandoned (its ncclCommAbort did not return in time). */
    boolean abandoned() {
        BoundedAbort run = aborting;
        return run != null && run.abandoned();
    }

    private String abandonment(BoundedAbort run) {
        return "ncclCommAbort did not return within " + Deadlines.toMillis(run.bound())
                + " ms: the communicator was abandoned, its native resources leaked on purpose";
    }

    /** The one ERROR line of an abandoned abort: what is left behind, and which thread stays blocked. */
    private void logAbandoned(BoundedAbort run) {
        Thread inside = callThread;
        LOG.error("rank {}: {} (NCCL's communicator, the thread {} blocked in ncclCommAbort, and this communicator's"
                        + " native memory: never freed while that thread may return); threads waiting on the"
                        + " communicator are released with CommunicatorAbortedException{}", rank, abandonment(run),
                run.thread().getName(), inside == null ? "" : "; thread " + inside.getName() + " is still inside an"
                        + " NCCL call of it, which cannot be released: it stays blocked there");
    }

    /**
     * Takes the lock for close within {@code timeout}; if a thread still holds it then (held inside
     * a blocking NCCL call), runs {@code abort} (which ends that call) and tries once more; after an
     * abandoned abort, each try lasts at most the abort's grace (see {@link #closeWait}). Returns
     * whether the caller now holds the lock; false: it gave up, and logged what is left behind.
     */
    boolean lockForClose(Duration timeout, Runnable abort) {
        if (tryLock(closeWait(timeout))) {
            return true;
        }
        abort.run();
        if (tryLock(closeWait(timeout))) {
            return true;
        }
        LOG.error("rank {}: close gave up waiting for a thread inside NCCL{}; its stream and events are left", rank,
                abandoned() ? " (the abort that would release it was abandoned)" : "");
        return false;
    }

    /**
     * How long close waits for the lock: {@code timeout}, but once an abort was abandoned at most
     * the abort's grace (its thread lets go of the lock right after): a holder still inside NCCL
     * then stays there, as that abort did not release it.
     */
    private Duration closeWait(Duration timeout) {
        Duration grace = Duration.ofMillis(ABORT_LOCK_GRACE_MILLIS);
        return abandoned() && timeout.compareTo(grace) > 0 ? grace : timeout;
    }

    private boolean tryLock(Duration timeout) {
        return tryLockUninterruptibly(Deadlines.deadline(timeout));
    }

    /**
     * The lock before {@code deadline} (a {@link Deadlines} one), interrupt or not: abort and close are how an interrupted
     * thread leaves a defined state, so they must not fail because of the interrupt. The interrupt
     * status is kept.
     */
    private boolean tryLockUninterruptibly(long deadline) {
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return lock.tryLock(Deadlines.remainingNanos(deadline), TimeUnit.NANOSECONDS);
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * The child a split published into {@link #childSlot} after its communicator was taken for the
     * abort (cleared here), or null. Runs on the abort's thread, before it returns: the arena (the
     * slot with it) is not closed until then (see {@link #closeArena}); a closed arena would mean
     * nothing is left, never a failed abort.
     */
    private MemorySegment lateChild() {
        try {
            if (!arena.scope().isAlive()) {
                return null;
            }
            MemorySegment late = nullToNull(childSlot.get(ADDRESS, 0));
            if (late != null) {
                childSlot.set(ADDRESS, 0, MemorySegment.NULL);
            }
            return late;
        } catch (IllegalStateException closedMeanwhile) {
            return null;
        }
    }

    /**
     * Closes the native memory once the handles are gone (after an abort that had to skip it).
     * Caller holds the lock. An abort still running is waited for (as {@link BoundedAbort#await});
     * its thread may still read the memory, so while it has not returned the close is left to that
     * thread, when (if ever) it returns: an abandoned communicator's memory is leaked.
     */
    void closeArena() {
        BoundedAbort run = aborting;
        if (run == null) {
            closeArenaNow();
            return;
        }
        run.await();
        run.afterReturn(this::closeArenaNow);
    }

    private void closeArenaNow() {
        synchronized (arenaClose) {
            if (isReleased() && arena.scope().isAlive()) {
                arena.close();
            }
        }
    }

    /**
     * Takes the handles (fields cleared under handleUse, so that a thread that comes back from NCCL
     * sees the communicator gone and close never touches them again), then aborts them on their
     * own thread and waits up to {@link #abortBound}; a second caller waits for the same abort.
     * Returns whether the abort has returned (or there was nothing to abort): false when it was
     * abandoned at the deadline, or when this thread was interrupted (the abort goes on, the
     * interrupt status is kept).
     */
    private boolean abortHandles() {
        BoundedAbort run;
        synchronized (handleUse) {
            run = aborting;
            MemorySegment blocking = child;
            MemorySegment nonBlocking = parent;
            if (run == null && (blocking != null || nonBlocking != null)) {
                child = null;
                parent = null;
                run = BoundedAbort.start(rank, abortBound(), () -> abortTaken(blocking, nonBlocking),
                        this::logAbandoned);
                aborting = run;
            }
        }
        return run == null || run.await();
    }

    /** The ncclCommAbort calls of the taken handles, on the abort's thread. */
    private void abortTaken(MemorySegment blocking, MemorySegment nonBlocking) {
        if (blocking != null) {
            warnIfFailed(Nccl.ncclCommAbort(blocking), "ncclCommAbort of the blocking communicator");
        }
        if (nonBlocking != null) {
            warnIfFailed(Nccl.ncclCommAbort(nonBlocking), "ncclCommAbort");
            // An aborted split may still have published its child: abort that one too.
            MemorySegment late = mode == CommunicatorMode.BLOCKING_SPLIT && blocking == null ? lateChild() : null;
            if (late != null) {
                warnIfFailed(Nccl.ncclCommAbort(late), "ncclCommAbort of the blocking communicator");
            }
        }
    }

    private void warnIfFailed(int result, String what) {
        if (result != SUCCESS) {
            LOG.warn("rank {}: {} returned {} ({})", rank, what, result, Native.ncclErrorText(result));
        }
    }

    // ---------------------------------------------------------------- helpers

    /** The communicator that runs the work (the blocking child, or the only one). */
    private MemorySegment work(String function) {
        MemorySegment handle = child != null ? child : (mode == CommunicatorMode.BLOCKING_SPLIT ? null : parent);
        if (handle == null) {
            throw new CommunicatorAbortedException(function + ": the communicator of rank " + rank + " was aborted");
        }
        return handle;
    }

    private int asyncError(MemorySegment handle) {
        int result = Nccl.ncclCommGetAsyncError(handle, asyncErrorSlot);
        return result != SUCCESS ? result : asyncErrorSlot.get(JAVA_INT, 0);
    }

    private void check(int result, String function, MemorySegment handle) {
        NcclCalls.checkNccl(result, function, handle, rank, device);
    }

    private NcclException failure(int result, String function, MemorySegment handle) {
        return NcclCalls.ncclFailure(result, function, handle, rank, device);
    }

    private static MemorySegment nullToNull(MemorySegment handle) {
        return handle == null || handle.equals(MemorySegment.NULL) ? null : handle;
    }

    private static MemorySegment segment(long address) {
        return MemorySegment.ofAddress(address);
    }
}
