package dev.jnccl;

import dev.jnccl.internal.Deadlines;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One ncclCommAbort of a communicator's handles, run on a daemon thread of its own so that every
 * thread that waits for it is bounded: NCCL's abort raises its abort flag, then waits for its
 * kernels, proxy thread and connections to wind down, and one that never does holds its caller for
 * good. The waiters give up at one deadline, fixed when the abort starts; the first that reaches it
 * marks the abort <i>abandoned</i> (once): the thread stays blocked inside NCCL, and whatever it
 * can still reach must never be freed ({@link #afterReturn} runs such releases only once, and if,
 * the abort has returned).
 */
final class BoundedAbort {
    private static final Logger LOG = LoggerFactory.getLogger(BoundedAbort.class);

    private final int rank;
    private final long deadline;
    private final Duration bound;
    private final Consumer<BoundedAbort> onAbandoned;
    private final CountDownLatch returned = new CountDownLatch(1);
    private final AtomicBoolean abandoned = new AtomicBoolean();
    /** Whether a waiter was interrupted already (said once). */
    private final AtomicBoolean interruptTold = new AtomicBoolean();
    private final Thread thread;
    /** What must wait until the abort has returned, in order (guarded by this); empty once run. */
    private final List<Runnable> pending = new ArrayList<>();
    /** Whether the abort has returned (guarded by this). */
    private boolean done;

    private BoundedAbort(int rank, Duration bound, Runnable abort, Consumer<BoundedAbort> onAbandoned) {
        this.rank = rank;
        this.bound = bound;
        this.deadline = Deadlines.deadline(bound);
        this.onAbandoned = onAbandoned;
        this.thread = Thread.ofPlatform().daemon().name("jnccl-abort-rank-" + rank).unstarted(() -> run(abort));
    }

    /**
     * Starts {@code abort} (the native calls) on a daemon thread named after {@code rank}; its
     * waiters give up {@code bound} from now, and the first of them gives this to {@code onAbandoned} then.
     */
    static BoundedAbort start(int rank, Duration bound, Runnable abort, Consumer<BoundedAbort> onAbandoned) {
        BoundedAbort started = new BoundedAbort(rank, bound, abort, onAbandoned);
        started.thread.start();
        return started;
    }

    private void run(Runnable abort) {
        try {
            abort.run();
        } catch (RuntimeException e) {
            LOG.warn("rank {}: the abort failed", rank, e);
        } finally {
            List<Runnable> then;
            synchronized (this) {
                done = true;
                then = List.copyOf(pending);
                pending.clear();
            }
            returned.countDown();
            then.forEach(Runnable::run);
        }
    }

    /**
     * Waits until the abort has returned (true), or gives up (false) at the deadline (the abort is
     * then abandoned) or at once when this thread is interrupted, before or during the wait: the
     * abort goes on on its own thread, and the interrupt status is kept.
     */
    boolean await() {
        if (returned.getCount() == 0) {
            return true;
        }
        try {
            if (returned.await(Deadlines.remainingNanos(deadline), TimeUnit.NANOSECONDS)) {
                return true;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            if (interruptTold.compareAndSet(false, true)) {
                LOG.info("rank {}: interrupted while waiting for ncclCommAbort; it goes on on thread {}", rank,
                        thread.getName());
            }
            return false;
        }
        if (abandoned.compareAndSet(false, true)) {
            onAbandoned.accept(this);
        }
        return false;
    }

    /**
     * Runs {@code action} once the abort has returned: now, on this thread, when it has; otherwise
     * on the abort's thread when (if ever) it returns, after the actions given before it.
     */
    void afterReturn(Runnable action) {
        synchronized (this) {
            if (!done) {
                pending.add(action);
                return;
            }
        }
        action.run();
    }

    /** Whether a waiter gave up at the deadline while ncclCommAbort had not returned. */
    boolean abandoned() {
        return abandoned.get();
    }

    /** The wait's bound. */
    Duration bound() {
        return bound;
    }

    /** The thread that calls ncclCommAbort (blocked there for good once abandoned). */
    Thread thread() {
        return thread;
    }
}
