package dev.jnccl.threads;

import dev.jnccl.JncclException;
import dev.jnccl.JncclInterruptedException;
import dev.jnccl.internal.Deadlines;
import java.time.Duration;
import java.util.Collections;
import java.util.List;
import java.util.SortedMap;
import java.util.OptionalInt;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The running ranks of {@link ThreadsCommunicators#launch}: one platform thread per GPU.
 * {@link #join()} waits for them and rethrows the first failure (the others attached as
 * suppressed exceptions); {@link #close()} aborts whatever still runs and waits, bounded.
 */
public final class ThreadsPack implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(ThreadsPack.class);

    /** How long an interrupted {@link #join()} still waits for the ranks' threads after aborting the pack. */
    static final Duration INTERRUPTED_JOIN_GRACE = Duration.ofSeconds(1);

    private final List<Thread> threads;
    private final PackState state;
    private final Throwable[] errors;
    /** The spare devices and the replacement ranks started on them; null without spares. */
    private final Replacements replacements;
    private boolean reported;

    ThreadsPack(List<Thread> threads, PackState state, Throwable[] errors, Replacements replacements) {
        this.threads = threads;
        this.state = state;
        this.errors = errors;
        this.replacements = replacements;
    }

    /**
     * The devices on which replacement ranks were started (see {@link
     * ThreadsOptions#withReplacementDevices}), in start order: one per replaced lost rank. A snapshot.
     *
     * @return the devices, empty when no rank was replaced
     */
    public List<Integer> replacementDevices() {
        return replacements == null ? List.of() : replacements.usedDevices();
    }

    /** The ranks' threads and then the replacements' started so far (the ranks start them while they run). */
    private List<Thread> allThreads() {
        if (replacements == null) {
            return threads;
        }
        List<Thread> all = new java.util.ArrayList<>(threads);
        all.addAll(replacements.threads());
        return all;
    }

    /** {@return the number of ranks} */
    public int size() {
        return threads.size();
    }

    /** {@return what each rank's thread did about CPU affinity, in rank order (for logs and tests)} */
    public List<String> affinityReports() {
        return state.affinityReports();
    }

    /**
     * The replacement ranks the pack went on without (a replacement is lost like any rank, see
     * {@link #lostRanks()}, which names only the launch's own ranks), each by its index in
     * {@link #replacementDevices()} with what made it lost. Empty when none was lost. A snapshot.
     *
     * @return index of the lost replacement's device to its exception, in start order
     */
    public SortedMap<Integer, Throwable> lostReplacements() {
        return replacements == null ? Collections.emptySortedMap()
                : Collections.unmodifiableSortedMap(replacements.lostErrors());
    }

    /** {@return whether any rank has failed the pack so far (a lost rank, see {@link #lostRanks()}, has not)} */
    public boolean hasException() {
        return state.failure() != null;
    }

    /**
     * The ranks the pack went on without (see {@link ThreadsOptions#withContinueWithoutFailedRanks}),
     * each with what made it lost: what its work threw, the exception of its interrupted wait, or
     * (a hung rank) the watchdog's verdict that named it.
     * Empty when none was lost (always with that option off). A snapshot: ranks lost later are not
     * in it. Replacement ranks that were lost in turn are in {@link #lostReplacements()}.
     *
     * @return lost rank to its exception, in rank order
     */
    public SortedMap<Integer, Throwable> lostRanks() {
        return Collections.unmodifiableSortedMap(state.lostErrors());
    }

    /**
     * The rank whose failure failed the pack first: the one {@link #join()} rethrows, also when that
     * failure was not thrown by the rank's work (a watchdog's abort, an asynchronous NCCL error), so
     * that a caller can tell the culprit from the ranks the pack released.
     *
     * @return that rank, or empty when no rank has failed (or the pack failed from outside: closed,
     *         or its join interrupted)
     */
    public OptionalInt failedRank() {
        PackState.Failure first = state.failure();
        return first == null || first.rank() < 0 ? OptionalInt.empty() : OptionalInt.of(first.rank());
    }

    /**
     * Waits for every rank to finish; if any failed, throws the first failure with the other ranks'
     * failures attached as suppressed exceptions. Ranks the pack went on without (see
     * {@link #lostRanks()}) are not failures: the join returns once the survivors' work returned.
     *
     * <p>An interrupt of the joining thread aborts the pack (every rank is released and its user code
     * interrupted), waits up to 1 s for the ranks' threads, and throws
     * the pack's first failure (a {@link JncclInterruptedException} when the interrupt came first),
     * with the interrupt status kept.
     */
    public void join() {
        List<Thread> joined = List.of();
        List<Thread> all = allThreads();
        while (all.size() > joined.size()) { // a joined rank may have started a replacement meanwhile
            for (Thread thread : all) {
                try {
                    thread.join();
                } catch (InterruptedException e) {
                    state.fail(-1, new JncclInterruptedException("ThreadsPack.join was interrupted: the pack was"
                            + " aborted", e));
                    awaitThreads(INTERRUPTED_JOIN_GRACE);
                    Thread.currentThread().interrupt();
                    rethrow();
                    return;
                }
            }
            joined = all;
            all = allThreads();
        }
        rethrow();
    }

    /** Waits for the ranks' threads, interrupt or not, at most {@code grace} in all; keeps the interrupt status. */
    private void awaitThreads(Duration grace) {
        long deadline = Deadlines.deadline(grace);
        boolean interrupted = false;
        for (Thread thread : allThreads()) {
            while (thread.isAlive() && !Deadlines.passed(deadline)) {
                try {
                    thread.join(Duration.ofNanos(Math.max(1, Deadlines.remainingNanos(deadline))));
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * As {@link #join()}, but gives up after {@code timeout}; returns whether all ranks finished.
     *
     * @param timeout the longest wait
     * @return whether every rank finished within {@code timeout}
     * @throws InterruptedException when the calling thread is interrupted while waiting
     */
    public boolean join(Duration timeout) throws InterruptedException {
        long deadline = Deadlines.deadline(timeout);
        for (Thread thread : allThreads()) {
            long left = deadline - System.nanoTime();
            if (left <= 0 || !thread.join(Duration.ofNanos(left))) {
                return false;
            }
        }
        rethrow();
        return true;
    }

    private synchronized void rethrow() {
        PackState.Failure first = state.failure();
        if (first == null || reported) {
            return;
        }
        reported = true;
        Throwable primary = first.error();
        for (Throwable error : errors) {
            if (error != null && error != primary) {
                primary.addSuppressed(error);
            }
        }
        if (primary instanceof RuntimeException runtime) {
            throw runtime;
        }
        if (primary instanceof Error error) {
            throw error;
        }
        throw new JncclException("rank " + first.rank() + " failed: " + primary, primary);
    }

    /**
     * Aborts ranks still running (they see {@code CommunicatorAbortedException}) and waits for the
     * threads, at most the communicators' close timeout plus a few seconds. Never throws.
     */
    @Override
    public void close() {
        boolean running = allThreads().stream().anyMatch(Thread::isAlive);
        if (running) {
            state.fail(-1, new JncclException("ThreadsPack closed while ranks were still running"));
        }
        long waitMillis = 5_000;
        for (Thread thread : allThreads()) {
            try {
                if (!thread.join(Duration.ofMillis(waitMillis))) {
                    LOG.error("ThreadsPack.close: thread {} did not finish within {} ms", thread.getName(), waitMillis);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
        if (running) {
            LOG.debug("ThreadsPack closed after aborting running ranks ({} ms budget per thread)", waitMillis);
        }
    }
}
