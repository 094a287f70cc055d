package dev.jnccl.threads;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;

/**
 * What the ranks of one pack share: a barrier that breaks when any rank fails, slots for host
 * gathers and for the per-transaction exchange of threads mode, the launch-queue throttle's
 * counters, and the first failure.
 */
final class PackState {
    /** The first failure of the pack. */
    record Failure(int rank, Throwable error) {}

    private final int size;
    private final Object lock = new Object();
    private final AtomicReference<Failure> failure = new AtomicReference<>();
    private final Communicator[] communicators;
    private final Object[] slots;
    private final long[] started;
    private final String[] affinity;
    private final List<AutoCloseable> retired = new ArrayList<>();
    private int left;
    private int arrived;
    private long generation;
    private String generationOperation;
    private int generationRank;

    PackState(int size) {
        this.size = size;
        this.communicators = new Communicator[size];
        this.slots = new Object[size];
        this.started = new long[size];
        this.affinity = new String[size];
    }

    void reportAffinity(int rank, String report) {
        synchronized (lock) {
            affinity[rank] = report;
        }
    }

    /** What each rank's thread did about CPU affinity (null where pinning was off). */
    List<String> affinityReports() {
        synchronized (lock) {
            return Arrays.asList(affinity.clone());
        }
    }

    int size() {
        return size;
    }

    void register(int rank, Communicator communicator) {
        synchronized (lock) {
            communicators[rank] = communicator;
        }
        Failure failed = failure.get();
        if (failed != null) {
            communicator.abort(reason(failed));
        }
    }

    Failure failure() {
        return failure.get();
    }

    /** Why the pack is failing, or null: polled by communicator init so nobody waits for a dead rank. */
    String cancellation() {
        Failure failed = failure.get();
        return failed == null ? null : reason(failed);
    }

    static String reason(Failure failed) {
        return "rank " + failed.rank() + " failed: " + failed.error();
    }

    /**
     * Records {@code error} of {@code rank}; the first failure releases every waiting rank and
     * aborts every communicator of the pack. Returns whether this was the first failure.
     */
    boolean fail(int rank, Throwable error) {
        Failure failed = new Failure(rank, error);
        if (!failure.compareAndSet(null, failed)) {
            return false;
        }
        Communicator[] toAbort;
        synchronized (lock) {
            lock.notifyAll();
            toAbort = communicators.clone();
        }
        for (Communicator communicator : toAbort) {
            if (communicator != null) {
                communicator.abort(reason(failed));
            }
        }
        return true;
    }

    private CommunicatorAbortedException released(String operation, int rank) {
        Failure failed = failure.get();
        return new CommunicatorAbortedException(operation + " on rank " + rank + " released: " + reason(failed),
                failed.error());
    }

    /**
     * Blocks until all ranks arrive; throws when a rank of the pack has failed. Every arrival names
     * its operation: ranks that meet in different host-side calls (one in a transaction, another
     * done with its work or in a barrier) would otherwise pair up wrongly and hang, so that fails
     * the pack with a message naming both ranks.
     */
    void barrier(String operation, int rank) {
        // fail() aborts communicators, which take their owners' locks: never call it holding ours.
        RuntimeException own = awaitOthers(operation, rank);
        if (own != null) {
            fail(rank, own);
            throw own;
        }
    }

    /** The barrier itself; returns this rank's own failure (mismatch, interrupt) instead of failing the pack. */
    private RuntimeException awaitOthers(String operation, int rank) {
        synchronized (lock) {
            if (failure.get() != null) {
                throw released(operation, rank);
            }
            // Checked and counted under one lock hold, so two ranks cannot both see an empty barrier.
            if (arrived == 0) {
                generationOperation = operation;
                generationRank = rank;
            } else if (!generationOperation.equals(operation)) {
                return new IllegalStateException("rank " + rank + " is in " + operation + " while rank "
                        + generationRank + " is in " + generationOperation + ": in threads mode every rank must make"
                        + " the same host-side calls (barrier, host gathers, memcpy-mode transactions) in the same"
                        + " order");
            }
            long mine = generation;
            if (++arrived == size) {
                arrived = 0;
                generation++;
                lock.notifyAll();
                return null;
            }
            while (generation == mine) {
                if (failure.get() != null) {
                    throw released(operation, rank);
                }
                try {
                    lock.wait();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return new CommunicatorAbortedException(operation + " on rank " + rank + " interrupted");
                }
            }
            return null;
        }
    }

    /** Every rank's {@code value}, in rank order (two barriers: publish, then free the slots). */
    @SuppressWarnings("unchecked")
    <T> List<T> exchange(String operation, int rank, T value) {
        synchronized (lock) {
            slots[rank] = value;
        }
        barrier(operation, rank);
        List<T> all;
        synchronized (lock) {
            all = new ArrayList<>((List<T>) Arrays.asList(slots));
        }
        barrier(operation, rank);
        return all;
    }

    /**
     * Launch-queue throttle: rank {@code rank} starts its transaction number {@code sequence} only
     * when no rank is more than {@code maxLead} transactions behind.
     */
    void throttle(int rank, long sequence, int maxLead) {
        synchronized (lock) {
            started[rank] = sequence;
            lock.notifyAll();
            while (true) {
                if (failure.get() != null) {
                    throw released("transaction throttle", rank);
                }
                long slowest = Long.MAX_VALUE;
                for (long s : started) {
                    slowest = Math.min(slowest, s);
                }
                if (sequence - slowest <= maxLead) {
                    return;
                }
                try {
                    lock.wait(100);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new CommunicatorAbortedException("transaction throttle on rank " + rank + " interrupted");
                }
            }
        }
    }

    /**
     * Keeps resources that peers may still use (the memcpy transports' events, which every rank
     * waits on) until every rank has left the pack.
     */
    void retire(AutoCloseable... resources) {
        synchronized (lock) {
            retired.addAll(List.of(resources));
        }
    }

    /** Called once per rank after its communicator is closed; the last one frees what was retired. */
    void leave() {
        List<AutoCloseable> toClose;
        synchronized (lock) {
            if (++left < size) {
                return;
            }
            toClose = new ArrayList<>(retired);
            retired.clear();
        }
        for (AutoCloseable resource : toClose) {
            try {
                resource.close();
            } catch (Exception e) {
                // Teardown of an event; nothing can use it any more and nothing else depends on it.
            }
        }
    }

    /** A rank that is done never holds the others back in the throttle. */
    void finished(int rank) {
        synchronized (lock) {
            started[rank] = Long.MAX_VALUE;
            lock.notifyAll();
        }
    }
}
