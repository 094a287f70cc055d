package dev.jnccl.internal;

import java.util.concurrent.locks.LockSupport;

/**
 * The pause between two polls of a wait: spin briefly (short waits stay fast), then park longer
 * and longer. Never spins on an interrupted thread: {@code LockSupport.parkNanos} returns at once
 * while the interrupt status is set, so a loop that kept calling it would burn a core.
 */
public final class Backoff {
    private static final int SPINS = 64;
    private static final int SHORT_PARKS = 1024;
    private static final long SHORT_PARK_NANOS = 20_000;
    private static final long LONG_PARK_NANOS = 200_000;

    private Backoff() {}

    /**
     * Pauses for the {@code spins}-th time (0-based) of one wait, interrupted or not: on an
     * interrupted thread it parks anyway (clearing the status for the park and setting it again
     * afterwards), for waits that must go on until their own deadline (e.g. a close draining work).
     * Waits that should end on an interrupt use {@link #pauseOrInterrupted}.
     */
    public static void pause(long spins) {
        if (spins < SPINS && !Thread.currentThread().isInterrupted()) {
            Thread.onSpinWait();
            return;
        }
        park(parkNanos(spins));
    }

    /**
     * Parks for {@code nanos}, interrupted or not, and leaves the interrupt status as it was (or
     * set, when an interrupt came meanwhile). For polls that go on until their own deadline or
     * cancellation whatever the interrupt status. An interrupted thread sleeps instead of parking:
     * setting the status again also hands the thread a park permit, so its next park would return
     * at once.
     */
    public static void park(long nanos) {
        if (!Thread.interrupted()) {
            LockSupport.parkNanos(nanos);
            return;
        }
        try {
            Thread.sleep(nanos / 1_000_000, (int) (nanos % 1_000_000));
        } catch (InterruptedException e) {
            // interrupted again while asleep: the status is set below all the same
        }
        Thread.currentThread().interrupt();
    }

    /**
     * Pauses for the {@code spins}-th time of one wait unless the thread is interrupted.
     *
     * @return true when the thread is interrupted (before or during the pause; its interrupt
     *         status stays set): the caller ends its wait
     */
    public static boolean pauseOrInterrupted(long spins) {
        if (Thread.currentThread().isInterrupted()) {
            return true;
        }
        if (spins < SPINS) {
            Thread.onSpinWait();
        } else {
            LockSupport.parkNanos(parkNanos(spins));
        }
        return Thread.currentThread().isInterrupted();
    }

    private static long parkNanos(long spins) {
        return spins < SHORT_PARKS ? SHORT_PARK_NANOS : LONG_PARK_NANOS;
    }
}
