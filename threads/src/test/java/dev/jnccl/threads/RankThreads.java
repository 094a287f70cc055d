package dev.jnccl.threads;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.fail;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Plain threads standing in for a pack's ranks: each runs one task, and what it returned or threw
 * is kept for the test thread; every wait here has a deadline, so a broken pack fails the test
 * instead of hanging it.
 */
final class RankThreads {
    /** What a rank's task does; may throw anything, which is then its outcome. */
    interface Task {
        Object run(int rank) throws Exception;
    }

    /** A generous bound for things that should happen at once, on a loaded two-core machine. */
    static final long SOON_MS = 10_000;

    private final List<Thread> threads = new ArrayList<>();
    private final Object[] results;
    private final Throwable[] errors;
    private final boolean[] interruptedAfter;

    private RankThreads(int count) {
        results = new Object[count];
        errors = new Throwable[count];
        interruptedAfter = new boolean[count];
    }

    /** Starts {@code task} for each of {@code ranks} (results are indexed by rank). */
    static RankThreads start(int size, Task task, int... ranks) {
        RankThreads all = new RankThreads(size);
        for (int rank : ranks) {
            Thread thread = Thread.ofPlatform().name("rank-" + rank).start(() -> {
                try {
                    all.results[rank] = task.run(rank);
                } catch (Throwable e) {
                    all.errors[rank] = e;
                }
                all.interruptedAfter[rank] = Thread.currentThread().isInterrupted();
            });
            all.threads.add(thread);
        }
        return all;
    }

    Thread thread(int index) {
        return threads.get(index);
    }

    /** Waits, at most {@link #SOON_MS}, for every rank's task to end. */
    RankThreads join() throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(SOON_MS);
        for (Thread thread : threads) {
            long left = deadline - System.nanoTime();
            thread.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(left)));
            assertFalse(thread.isAlive(), thread.getName() + " still runs after " + SOON_MS + " ms");
        }
        return this;
    }

    Object result(int rank) {
        return results[rank];
    }

    Throwable error(int rank) {
        return errors[rank];
    }

    /** Whether the rank's thread had its interrupt status set when its task ended. */
    boolean interruptedAfter(int rank) {
        return interruptedAfter[rank];
    }

    /** Fails unless the rank's task ended without an exception. */
    void assertNoError(int rank) {
        if (errors[rank] != null) {
            throw new AssertionError("rank " + rank + " threw", errors[rank]);
        }
    }

    /** Blocks until {@code thread} waits in a timed wait (a barrier or the throttle), at most {@link #SOON_MS}. */
    static void awaitWaiting(Thread thread) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(SOON_MS);
        while (thread.getState() != Thread.State.TIMED_WAITING && thread.getState() != Thread.State.WAITING) {
            if (!thread.isAlive() || System.nanoTime() > deadline) {
                fail(thread.getName() + " did not start waiting (state " + thread.getState() + ")");
            }
            Thread.sleep(2);
        }
    }
}
