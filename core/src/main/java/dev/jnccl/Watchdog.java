package dev.jnccl;

import dev.jnccl.cuda.CudaStream;
import dev.jnccl.internal.Deadlines;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.BooleanSupplier;
import java.util.function.LongFunction;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The optional monitor of one communicator: a daemon thread that, every interval, looks for an
 * NCCL asynchronous error, for a transaction whose completion event has not fired within the
 * timeout, and for an enqueue held inside NCCL for longer than the timeout; on any of them it
 * calls the abort callback (which logs the flight recorder and aborts). It also does the
 * completion tracking: each interval it records a probe event on the comms stream after the
 * transactions executed since the last one (see {@link FlightRecorder}).
 */
final class Watchdog {
    private static final Logger LOG = LoggerFactory.getLogger(Watchdog.class);
    /** How an abort for a thread interrupted inside NCCL begins its reason (its exception's cause then is an InterruptedException). */
    static final String INTERRUPTED_IN_NCCL = "a thread interrupted while inside NCCL";

    private final int rank;
    private final NcclComm comm;
    /** The comms stream, where the watchdog records its completion probes (holding the comm lock). */
    private final CudaStream stream;
    private final FlightRecorder recorder;
    private final Duration timeout;
    private final Duration interval;
    private final BooleanSupplier open;
    /** What the launcher knows about the other ranks, asked with the oldest pending transaction's age (-1: none). */
    private final LongFunction<String> peers;
    private final Consumer<String> abort;
    private final Thread thread;
    /** The oldest pending transaction, filled by each poll: one object for the watchdog's life, so that a poll allocates nothing. */
    private final FlightRecorder.Pending pending = new FlightRecorder.Pending();
    /** Polls made (written by the watchdog thread only): lets a test relate its thread's allocation to polls. */
    private volatile long polls;
    /** When this watchdog's poll entered its CUDA calls (probes), 0 outside them; see {@link WatchdogSentinel}. */
    private volatile long inCudaSince;
    /** Whether the sentinel has aborted for a poll held inside CUDA (once). */
    private final AtomicBoolean sentinelFired = new AtomicBoolean();

    /**
     * Starts the monitor thread.
     *
     * @param open  whether the communicator is still open (the thread ends when it is not)
     * @param abort aborts the communicator with a reason; must not need the comm lock
     */
    Watchdog(int rank, NcclComm comm, CudaStream stream, FlightRecorder recorder, Duration timeout, Duration interval,
                    BooleanSupplier open, Consumer<String> abort, LongFunction<String> peers) {
        this.rank = rank;
        this.comm = comm;
        this.stream = stream;
        this.recorder = recorder;
        this.timeout = timeout;
        this.interval = interval;
        this.open = open;
        this.abort = abort;
        this.peers = peers;
        this.thread = Thread.ofPlatform().daemon().name("jnccl-watchdog-rank-" + rank).unstarted(this::watch);
        thread.start();
        WatchdogSentinel.add(this);
    }

    /** Stops the thread and waits (bounded) for it; returns whether it has ended. */
    boolean stop() {
        WatchdogSentinel.remove(this);
        thread.interrupt();
        // Waited for even on an interrupted thread (a rank released by a failing pack closes with its
        // interrupt status set): a watchdog left running could still touch the communicator.
        long deadline = Deadlines.deadline(interval.multipliedBy(2).plusSeconds(2));
        boolean interrupted = false;
        while (thread.isAlive() && !Deadlines.passed(deadline)) {
            try {
                thread.join(Math.max(1, Deadlines.remainingNanos(deadline) / 1_000_000));
            } catch (InterruptedException e) {
                interrupted = true;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
        if (thread.isAlive()) {
            LOG.warn("rank {}: watchdog thread did not stop in time", rank);
            return false;
        }
        return true;
    }

    /** {@return how many polls were made so far} */
    long polls() {
        return polls;
    }

    /** {@return the id of the monitor thread} */
    long threadId() {
        return thread.threadId();
    }

    private void watch() {
        try {
            watchUntilClosed();
        } finally {
            WatchdogSentinel.remove(this);
        }
    }

    private void watchUntilClosed() {
        long timeoutNanos = Deadlines.toNanos(timeout);
        long intervalNanos = Deadlines.toNanos(interval);
        while (open.getAsBoolean()) {
            if (!pause(intervalNanos)) {
                return;
            }
            try {
                String reason = check(timeoutNanos);
                polls++; // one writer: this thread
                if (reason != null) {
                    if (open.getAsBoolean()) {
                        abort.accept("watchdog: " + reason);
                    }
                    return;
                }
            } catch (RuntimeException e) {
                if (open.getAsBoolean()) {
                    abort.accept("watchdog: polling failed: " + e);
                }
                return;
            }
        }
    }

    /**
     * Waits one interval; false once the thread is interrupted ({@link #stop}). Parks rather than
     * sleeps: {@code Thread.sleep} makes a JFR event object on every call (40 bytes, which only C2's
     * escape analysis removes, and at the default interval C2 compiles this loop after tens of
     * minutes), and a poll is to allocate nothing.
     */
    private static boolean pause(long nanos) {
        long deadline = System.nanoTime() + nanos;
        for (long left = nanos; left > 0; left = deadline - System.nanoTime()) {
            LockSupport.parkNanos(left);
            if (Thread.currentThread().isInterrupted()) {
                return false;
            }
        }
        return true;
    }

    /** One look; the reason to abort, or null. */
    private String check(long timeoutNanos) throws RuntimeException {
        String failure = pollNccl();
        if (failure != null) {
            return failure.isEmpty() ? null : failure;
        }
        Thread interrupted = comm.interruptedCaller();
        if (interrupted != null) {
            // Aborting is the only way to return it: the thread's call fails, and the rank's peers
            // are released as for any abort.
            return INTERRUPTED_IN_NCCL + " (thread " + interrupted.getName() + ")";
        }
        long now = System.nanoTime();
        long enqueueAge = comm.enqueueAgeNanos(now);
        if (enqueueAge > timeoutNanos) {
            return "an enqueue has been inside NCCL for " + TimeUnit.NANOSECONDS.toMillis(enqueueAge) + " ms (timeout "
                    + Deadlines.toMillis(timeout) + " ms)";
        }
        long pendingAge = oldestPendingAgeNanos();
        if (pendingAge > timeoutNanos) {
            return pending.name() + " not complete after "
                    + TimeUnit.NANOSECONDS.toMillis(pendingAge) + " ms (timeout " + Deadlines.toMillis(timeout) + " ms)";
        }
        // A rank waiting inside an enqueue waits for its peers as much as one waiting for a tracked
        // transaction: the host side hears of both.
        return peers.apply(Math.max(enqueueAge, recorder.oldestUnfinishedAgeNanos(System.nanoTime())));
    }

    /**
     * NCCL's asynchronous error and the completion probe, under the comm lock: the failure, "" when
     * the communicator is closed or released (nothing more to check), null otherwise. A thread held
     * inside a blocking NCCL call keeps the lock: then the error poll is skipped (the enqueue age
     * catches it) instead of waiting for the lock.
     */
    private String pollNccl() {
        ReentrantLock lock = comm.lock();
        if (!lock.tryLock()) {
            return null;
        }
        try {
            if (!open.getAsBoolean() || comm.isReleased()) {
                return "";
            }
            String failure = comm.asyncFailure();
            if (failure != null) {
                return failure;
            }
            // Completion is probed here, off the executing thread's path (see FlightRecorder).
            inCudaSince = System.nanoTime();
            recorder.probe(stream);
            return null;
        } finally {
            inCudaSince = 0;
            lock.unlock();
        }
    }

    /** The age of the oldest transaction not known complete (its probe's query is a CUDA call), or -1. */
    private long oldestPendingAgeNanos() {
        inCudaSince = System.nanoTime();
        try {
            return recorder.pollOldestPending(pending) ? pending.ageNanos(System.nanoTime()) : -1;
        } finally {
            inCudaSince = 0;
        }
    }

    /**
     * The checks that need no CUDA, made by the {@link WatchdogSentinel} while this watchdog's own poll
     * has been held inside CUDA for longer than two intervals: the poll's own wait counts as a
     * transaction not complete, since nothing can complete that CUDA does not let the watchdog see.
     */
    void checkWhileHeld(long now) {
        long since = inCudaSince;
        if (since == 0 || now - since < 2 * Deadlines.toNanos(interval) || !open.getAsBoolean()) {
            return;
        }
        long held = now - since;
        long timeoutNanos = Deadlines.toNanos(timeout);
        String reason = held > timeoutNanos ? "its poll has been held inside CUDA for "
                + TimeUnit.NANOSECONDS.toMillis(held) + " ms (timeout " + Deadlines.toMillis(timeout) + " ms): a"
                + " device-wide CUDA call (cudaFree, a synchronize) waits behind work that does not complete"
                : peers.apply(Math.max(comm.enqueueAgeNanos(now), Math.max(held,
                        recorder.oldestUnfinishedAgeNanos(now))));
        if (reason != null && sentinelFired.compareAndSet(false, true)) {
            LOG.warn("rank {}: the watchdog's poll is held inside CUDA; aborting from its sentinel", rank);
            String why = "watchdog: " + reason;
            Thread.ofPlatform().daemon().name("jnccl-watchdog-abort-rank-" + rank).start(() -> {
                if (open.getAsBoolean()) {
                    abort.accept(why);
                }
            });
        }
    }
}
