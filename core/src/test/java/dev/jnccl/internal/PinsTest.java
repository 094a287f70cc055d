package dev.jnccl.internal;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * Pins of resources (no device): a pinned resource's close is refused naming its holders, and a
 * close that waits (a cudaFree behind work that never completes) holds up no other resource's close
 * nor any pin, while a pin of the resource being closed is refused.
 */
class PinsTest {
    /** A hang guard, no performance assertion: each of these calls returns at once when correct. */
    private static final Duration GUARD = Duration.ofSeconds(30);

    @Test
    void aPinnedResourceIsNotClosedAndItsHoldersAreNamed() {
        Object resource = new Object();
        AtomicInteger closes = new AtomicInteger();
        assertTrue(Pins.pin(resource, "rank 3", () -> false));
        assertTrue(Pins.pin(resource, "rank 5", () -> false));
        assertEquals(List.of("rank 3", "rank 5"), Pins.unlessPinned(resource, closes::incrementAndGet));
        Pins.unpin(resource, "rank 3");
        assertEquals(List.of("rank 5"), Pins.unlessPinned(resource, closes::incrementAndGet));
        assertEquals(0, closes.get(), "a pinned resource was closed");
        Pins.unpin(resource, "rank 5");
        assertNull(Pins.unlessPinned(resource, closes::incrementAndGet));
        assertEquals(1, closes.get());
        assertFalse(Pins.pin(resource, "rank 3", () -> true), "a closed resource was pinned");
    }

    @Test
    void aCloseThatWaitsHoldsUpNoOtherCloseAndNoPin() throws Exception {
        Object waiting = new Object();
        Object other = new Object();
        CountDownLatch inClose = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        AtomicReference<Object> outcome = new AtomicReference<>("not ended");
        Thread closer = Thread.ofPlatform().daemon().start(() -> outcome.set(Pins.unlessPinned(waiting, () -> {
            inClose.countDown();
            try {
                release.await(2 * GUARD.toSeconds(), TimeUnit.SECONDS); // beyond the guards: the test releases it
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        })));
        try {
            assertTrue(inClose.await(GUARD.toSeconds(), TimeUnit.SECONDS), "the close did not start");
            AtomicInteger closes = new AtomicInteger();
            assertNull(assertTimeoutPreemptively(GUARD, () -> Pins.unlessPinned(other, closes::incrementAndGet)));
            assertEquals(1, closes.get());
            assertTrue(assertTimeoutPreemptively(GUARD, () -> Pins.pin(other, "rank 1", () -> false)));
            Pins.unpin(other, "rank 1");
            assertFalse(assertTimeoutPreemptively(GUARD, () -> Pins.pin(waiting, "rank 2", () -> false)),
                    "the resource being closed was pinned");
        } finally {
            release.countDown();
            closer.join(2 * GUARD.toMillis());
        }
        assertFalse(closer.isAlive());
        assertNull(outcome.get(), "the waiting close was refused");
    }
}
