package dev.jnccl.internal;

import java.util.concurrent.locks.LockSupport;

/** The pause between two polls of a wait: spin briefly (short waits stay fast), then park longer and longer. */
public final class Backoff {
    private Backoff() {}

    /** Pauses for the {@code spins}-th time (0-based) of one wait. */
    public static void pause(long spins) {
        if (spins < 64) {
            Thread.onSpinWait();
        } else {
            LockSupport.parkNanos(spins < 1024 ? 20_000 : 200_000);
        }
    }
}
