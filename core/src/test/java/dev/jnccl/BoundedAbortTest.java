package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * {@link BoundedAbort} with a stand-in for ncclCommAbort that returns only when the test lets it:
 * waiters give up at the deadline and the abort is abandoned once; an interrupt ends a wait at once;
 * what must wait for the abort's return runs then, in order, on the abort's thread, or at once
 * when it has returned. Every stand-in is released at the end, so no thread is left.
 */
class BoundedAbortTest {
    private static final Duration SHORT = Duration.ofMillis(200);
    private static final Duration LONG = Duration.ofMinutes(10);

    @Test
    void aReturningAbortIsWaitedForAndRunsLaterReleasesAtOnce() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        AtomicInteger abandoned = new AtomicInteger();
        BoundedAbort abort = BoundedAbort.start(4, LONG, () -> await(release), a -> abandoned.incrementAndGet());
        assertEquals("jnccl-abort-rank-4", abort.thread().getName());
        assertTrue(abort.thread().isDaemon(), "the abort's thread must not keep the JVM alive");
        List<String> ran = new CopyOnWriteArrayList<>();
        abort.afterReturn(() -> ran.add("first on " + Thread.currentThread().getName()));
        abort.afterReturn(() -> ran.add("second on " + Thread.currentThread().getName()));
        assertEquals(List.of(), ran, "released before the abort returned");
        release.countDown();
        assertTrue(abort.await());
        assertTrue(abort.thread().join(Duration.ofSeconds(20)));
        assertEquals(List.of("first on jnccl-abort-rank-4", "second on jnccl-abort-rank-4"), ran);
        abort.afterReturn(() -> ran.add("third on " + Thread.currentThread().getName()));
        assertEquals("third on " + Thread.currentThread().getName(), ran.get(2), "not run at once after the return");
        assertTrue(abort.await(), "a second wait after the return");
        assertFalse(abort.abandoned());
        assertEquals(0, abandoned.get());
    }

    @Test
    void aHangingAbortIsAbandonedOnceAtTheDeadline() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        List<BoundedAbort> told = new CopyOnWriteArrayList<>();
        BoundedAbort abort = BoundedAbort.start(2, SHORT, () -> await(release), told::add);
        AtomicBoolean released = new AtomicBoolean();
        abort.afterReturn(() -> released.set(true));
        try {
            assertFalse(abort.await(), "await() said the hanging abort returned");
            assertTrue(abort.abandoned());
            assertEquals(1, told.size());
            assertSame(abort, told.get(0));
            assertFalse(abort.await(), "a later wait after the deadline");
            assertEquals(1, told.size(), "abandoned twice");
            assertTrue(abort.thread().isAlive(), "the abort's thread ended although the abort hangs");
            assertFalse(released.get(), "released what the abort's thread may still use");
        } finally {
            release.countDown();
        }
        // A late return still releases (nothing uses it any more), on the abort's thread.
        assertTrue(abort.thread().join(Duration.ofSeconds(20)));
        assertTrue(released.get(), "not released when the abandoned abort returned after all");
    }

    @Test
    void anInterruptEndsTheWaitAtOnceAndKeepsTheStatus() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        BoundedAbort abort = BoundedAbort.start(1, LONG, () -> await(release), a -> { });
        AtomicReference<Boolean> result = new AtomicReference<>();
        AtomicBoolean statusKept = new AtomicBoolean();
        try {
            Thread waiter = Thread.ofPlatform().start(() -> {
                result.set(abort.await());
                statusKept.set(Thread.currentThread().isInterrupted());
            });
            awaitWaiting(waiter);
            waiter.interrupt();
            // Far below the bound (10 min): only the interrupt ends the wait in time.
            assertTrue(waiter.join(Duration.ofSeconds(20)), "the wait did not end on the interrupt");
            assertEquals(Boolean.FALSE, result.get());
            assertTrue(statusKept.get(), "the interrupt status was not kept");
            assertFalse(abort.abandoned(), "abandoned by an interrupt");
            // Already interrupted: no wait at all.
            Thread.currentThread().interrupt();
            assertFalse(abort.await());
            assertTrue(Thread.interrupted(), "the interrupt status was not kept");
        } finally {
            release.countDown();
        }
        assertTrue(abort.thread().join(Duration.ofSeconds(20)));
        assertTrue(abort.await(), "the abort went on and returned");
    }

    /** The stand-in for a native call that returns when the test says so (bounded: no thread left behind). */
    private static void await(CountDownLatch release) {
        try {
            assertTrue(release.await(60, TimeUnit.SECONDS), "the test never released the abort");
        } catch (InterruptedException e) {
            throw new AssertionError(e);
        }
    }

    /** Waits (bounded) until {@code thread} is in its timed wait. */
    private static void awaitWaiting(Thread thread) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (thread.getState() != Thread.State.TIMED_WAITING) {
            assertTrue(System.nanoTime() - deadline < 0, "the waiter never waited: " + thread.getState());
            Thread.sleep(5);
        }
    }
}
