package dev.jnccl.spi;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import java.time.Duration;
import java.util.List;

/**
 * How the ranks of one communicator meet on the host, and how a failure of one reaches the others:
 * what a launcher (threads in one JVM, MPI processes, a single rank) supplies for each rank. The
 * {@link Communicator} delegates its host-side calls here after checking their arguments and its
 * own state; it never waits for other ranks by itself.
 *
 * <p>Every wait for the other ranks ends after {@code timeoutNanos} ({@link Long#MAX_VALUE}: no
 * limit), when the waiting thread is interrupted (its interrupt status stays set) or when another
 * rank has failed, with a {@link dev.jnccl.CommunicatorAbortedException} that says which and, on
 * timeout or interrupt, names the ranks that did not arrive; the launcher then aborts this rank's
 * communicator and releases the others.
 */
public interface HostSide {

    /**
     * How long a host-side wait for the other ranks may take on a communicator with {@code options}:
     * the watchdog's timeout when the watchdog is on (a rank missing from a barrier is as stuck as
     * one missing from a collective), else no limit.
     *
     * @param options the communicator's options
     * @return the timeout in nanoseconds, {@link Long#MAX_VALUE} for none
     */
    static long timeoutNanos(CommunicatorOptions options) {
        return options.watchdogEnabled() ? timeoutNanos(options.watchdogTimeout()) : Long.MAX_VALUE;
    }

    /**
     * {@code timeout} in nanoseconds, saturated: beyond about 292 years, {@link Long#MAX_VALUE} (no limit).
     *
     * @param timeout the timeout
     * @return the timeout in nanoseconds
     */
    static long timeoutNanos(Duration timeout) {
        try {
            return timeout.toNanos();
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE;
        }
    }

    /**
     * Blocks until every rank of the communicator has called it.
     *
     * @param timeoutNanos how long to wait for the others
     */
    void barrier(long timeoutNanos);

    /**
     * Every rank's bytes on {@code root}, in rank order; an empty list on the other ranks.
     *
     * @param local        this rank's bytes (the caller keeps ownership: copy what is kept)
     * @param root         the rank that receives them all (checked by the caller)
     * @param timeoutNanos how long to wait for the others
     * @return the bytes of every rank on {@code root}, arrays the caller owns
     */
    List<byte[]> gather(byte[] local, int root, long timeoutNanos);

    /**
     * Every rank's bytes, in rank order, on every rank.
     *
     * @param local        this rank's bytes (the caller keeps ownership: copy what is kept)
     * @param timeoutNanos how long to wait for the others
     * @return the bytes of every rank, arrays the caller owns (no rank sees another rank's arrays)
     */
    List<byte[]> allGather(byte[] local, long timeoutNanos);

    /**
     * Called on every rank of the communicator, member of the new communicator or not (negative
     * color), for each split, after the colors and keys were exchanged and before NCCL splits:
     * where the host side needs every rank for its own split (MPI_Comm_split) or counts splits.
     *
     * @param color the color this rank passed to {@link Communicator#split}
     * @param key   the key this rank passed
     */
    default void beforeSplit(int color, int key) {}

    /**
     * The parts of this rank's communicator of a split, after NCCL has split, on every member.
     *
     * @param membership this rank's place in the new communicator
     * @return the new communicator's host side and transport
     * @throws UnsupportedOperationException when this host side has no sub-communicators
     */
    default RankParts split(Membership membership) {
        throw new UnsupportedOperationException("split: this launcher does not support sub-communicators");
    }

    /**
     * Polled while this rank waits for the others to create or split a communicator: a non-null
     * answer (another rank already failed) ends the wait with that reason.
     *
     * @return why waiting is pointless, or null
     */
    default String cancellation() {
        return null;
    }

    /**
     * Called before each transaction: where a launcher keeps one rank from queuing far ahead of the
     * others (threads mode: the ranks share one process's launch queue).
     *
     * @param timeoutNanos how long to wait for the others
     */
    default void pace(long timeoutNanos) {}

    /**
     * Polled by the watchdog every interval (with the communicator's lock not held): a reason to
     * abort now from what the host side knows about the other ranks, or null. MPI mode answers when
     * another rank closed its communicator after fewer transactions than this rank executed while
     * this rank's work has been pending for a while: this rank waits for a collective that rank
     * will never join.
     *
     * @param executed     the transactions this rank has executed (one whose enqueue has started counts)
     * @param pendingNanos how long the oldest incomplete transaction has been pending, or this rank has
     *                     been inside an enqueue (real NCCL connects to peers in the first collectives),
     *                     whichever is longer; -1 when neither
     * @return why to abort, or null
     */
    default String poll(long executed, long pendingNanos) {
        return null;
    }

    /**
     * Called by {@link Communicator#close()} on an open communicator before NCCL is finalized:
     * where the host side tells the other ranks how far this rank got, and waits (within
     * {@code timeoutNanos}) until they are closing too.
     *
     * @param executed     the transactions this rank has executed
     * @param timeoutNanos how long to wait for the other ranks
     * @return null when every rank is closing; else why not (the communicator is aborted instead)
     */
    default String closing(long executed, long timeoutNanos) {
        return null;
    }

    /**
     * The reason to record for an abort: a launcher that knows an earlier root cause (another rank
     * failed first) puts it in front, so that every rank's exception names the rank that failed.
     *
     * @param reason the reason given to {@link Communicator#abort}
     * @return the reason to record and report
     */
    default String explainAbort(String reason) {
        return reason;
    }

    /**
     * Called once when the communicator is aborted, before NCCL's abort: release threads waiting on
     * the host side and tell the other ranks.
     *
     * @param reason the recorded reason
     */
    default void aborting(String reason) {}

    /**
     * Called once after NCCL's abort has returned, on the aborting thread (MPI mode ends the job
     * here, so that peers blocked in NCCL do not hang).
     *
     * @param reason the recorded reason
     */
    default void aborted(String reason) {}

    /**
     * Called on a thread that is about to get {@link dev.jnccl.CommunicatorAbortedException}
     * (possibly holding the communicator's lock: must not wait for the communicator): threads mode
     * waits here, bounded, until no peer still copies from this rank's buffers, so that the caller
     * may free them once the exception arrives.
     *
     * @param reason the recorded reason
     */
    default void beforeAbortedException(String reason) {}

    /**
     * Called once, when the communicator these parts serve is ready to use.
     *
     * @param communicator the communicator
     */
    default void attached(Communicator communicator) {}

    /**
     * Called once by {@link Communicator#close()} after NCCL is done with the comms stream and the
     * transport is closed: free the host side's resources.
     *
     * @param aborted whether the communicator was aborted (MPI mode: no MPI call is valid then)
     */
    default void closed(boolean aborted) {}
}
