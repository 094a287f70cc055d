package dev.jnccl;

import java.util.Arrays;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * Looks after the watchdogs whose own poll is held inside CUDA. A watchdog records its completion
 * probes on the comms stream and queries them, and CUDA can hold those calls for as long as a
 * device-wide call of another thread waits: a user's {@code cudaFree} or device synchronize behind a
 * collective that never completes (a peer returned without it). The watchdog would then never see
 * its timeout, nor a peer that closed, and the rank would hang past every deadline. One daemon thread
 * for the JVM (started with the first watchdog, ended with the last) makes, for a watchdog held that way for longer than
 * two of its intervals, the checks that need no CUDA: the launcher's news of the other ranks, the age
 * of an enqueue held inside NCCL, and the time CUDA has held the poll itself against the watchdog's
 * timeout; the abort then runs on a thread of its own (it may diagnose, which waits for the peers).
 * Allocation-free while nothing is wrong, as the watchdogs are.
 */
final class WatchdogSentinel {
    /** How often the held polls are looked at. */
    private static final long PERIOD_NANOS = TimeUnit.MILLISECONDS.toNanos(100);
    /** The watchdogs to look after; replaced (never changed) on every add and remove. */
    private static volatile Watchdog[] watched = new Watchdog[0];
    private static Thread thread;

    private WatchdogSentinel() {}

    static synchronized void add(Watchdog watchdog) {
        Watchdog[] now = Arrays.copyOf(watched, watched.length + 1);
        now[now.length - 1] = watchdog;
        watched = now;
        if (thread == null) {
            thread = Thread.ofPlatform().daemon().name("jnccl-sentinel").start(WatchdogSentinel::watch);
        }
    }

    /**
     * Stops looking after {@code watchdog}; with the last one, ends the thread and waits for it
     * (bounded), so that no thread of jnccl outlives the communicators.
     */
    static void remove(Watchdog watchdog) {
        Thread ending;
        synchronized (WatchdogSentinel.class) {
            watched = Arrays.stream(watched).filter(w -> w != watchdog).toArray(Watchdog[]::new);
            if (watched.length > 0 || thread == null) {
                return;
            }
            ending = thread;
            thread = null;
        }
        ending.interrupt();
        if (ending != Thread.currentThread()) {
            boolean interrupted = false;
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(1);
            while (ending.isAlive() && System.nanoTime() < deadline) {
                try {
                    ending.join(Math.max(1, (deadline - System.nanoTime()) / 1_000_000));
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static void watch() {
        while (!Thread.currentThread().isInterrupted()) {
            LockSupport.parkNanos(PERIOD_NANOS);
            Watchdog[] now = watched;
            long time = System.nanoTime();
            for (Watchdog watchdog : now) {
                watchdog.checkWhileHeld(time);
            }
        }
    }
}
