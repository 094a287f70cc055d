package dev.jnccl.mpi;

import dev.jnccl.mpi.internal.MpiLibrary;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import java.util.function.BooleanSupplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The end of an MPI job after an abort, once per process: MPI_Abort, but not at once. The peers are
 * told of the abort first ({@link MpiDiagnoses#aborting}) and abort too, so that every rank's thread
 * gets its exception, led by the same verdict, before the job ends; MPI_Abort comes
 * {@value #GRACE_MILLIS} ms after every rank is known to have aborted, and at the latest
 * {@value #BOUND_MILLIS} ms after this rank's abort (a peer that is gone or never answers). It is
 * called from a daemon thread of its own ({@code jnccl-mpi-end-job}), so the aborting thread goes on
 * to throw its exception; a JVM that exits meanwhile (its main thread ended with that exception)
 * waits for it in a shutdown hook, so the job still ends through MPI_Abort.
 */
final class JobEnd {
    private static final Logger LOG = LoggerFactory.getLogger(JobEnd.class);
    /** How long the ranks' threads have to report their exceptions once every rank has aborted. */
    static final long GRACE_MILLIS = 1_000;
    /** The longest wait for the peers' aborts. */
    static final long BOUND_MILLIS = 3_000;
    private static final AtomicReference<Thread> ENDING = new AtomicReference<>();

    private JobEnd() {}

    /**
     * Ends the job (MPI_Abort on {@code job}, exit code {@link MpiHost#ABORT_EXIT_CODE}) once
     * {@code allAborted} says so plus the grace, or at the bound; a second call does nothing.
     */
    static void begin(MpiLibrary mpi, MpiLibrary.Handle job, int rank, int size, String reason,
                      BooleanSupplier allAborted) {
        Thread thread = Thread.ofPlatform().daemon().name("jnccl-mpi-end-job").unstarted(() -> {
            waitForPeers(allAborted);
            mpi.abort(job, MpiHost.ABORT_EXIT_CODE);
        });
        if (!ENDING.compareAndSet(null, thread)) {
            return;
        }
        thread.start();
        LOG.error("rank {} of {}: ending the MPI job (MPI_Abort, exit code {}) once every rank has aborted, within {}"
                + " ms: {}", rank, size, MpiHost.ABORT_EXIT_CODE, BOUND_MILLIS, reason);
        try {
            Runtime.getRuntime().addShutdownHook(new Thread(() -> await(0), "jnccl-mpi-end-job-hook"));
        } catch (IllegalStateException e) {
            // The JVM is already shutting down: the thread still ends the job before it halts.
        }
    }

    private static void waitForPeers(BooleanSupplier allAborted) {
        long start = System.nanoTime();
        long bound = TimeUnit.MILLISECONDS.toNanos(BOUND_MILLIS);
        while (System.nanoTime() - start < bound && !allAborted.getAsBoolean()) {
            LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(MpiDiagnoses.POLL_MILLIS));
        }
        long left = bound - (System.nanoTime() - start);
        LockSupport.parkNanos(Math.max(0, Math.min(left, TimeUnit.MILLISECONDS.toNanos(GRACE_MILLIS))));
    }

    /**
     * Waits for the job's end: for it to begin (within {@code beginMillis}: the abort of another
     * thread may still be inside NCCL's abort, which precedes it), then for the ending thread (bounded:
     * the bound, the grace and a margin). MPI_Abort on the ending thread ends this process during the
     * wait; it returns when the end never began, or on an interrupt (its status kept).
     */
    static void await(long beginMillis) {
        long end = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(beginMillis);
        while (ENDING.get() == null && System.nanoTime() < end && !Thread.currentThread().isInterrupted()) {
            LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(MpiDiagnoses.POLL_MILLIS));
        }
        Thread thread = ENDING.get();
        if (thread == null) {
            return;
        }
        while (thread.getState() == Thread.State.NEW) { // between begin's claim and its start: join would not wait
            LockSupport.parkNanos(TimeUnit.MILLISECONDS.toNanos(1));
        }
        try {
            thread.join(BOUND_MILLIS + GRACE_MILLIS + 2_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
