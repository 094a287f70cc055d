package dev.jnccl.spi;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.internal.Deadlines;
import java.util.List;

/**
 * How the ranks of one communicator meet on the host: what every launcher (threads in one JVM, MPI
 * processes, ranks that share only a unique id, a single rank) must supply for each rank. The
 * {@link Communicator} delegates its host-side calls here after checking their arguments and its
 * own state; it never waits for other ranks by itself. What a launcher does at the other points of
 * a communicator's life, and how a failure reaches the other ranks, are optional parts of the same
 * {@link RankParts}: {@link RankEvents} and {@link Failures}.
 *
 * <p>Every wait for the other ranks ends after {@code timeoutNanos} ({@link Long#MAX_VALUE}: no
 * limit), when the waiting thread is interrupted (its interrupt status stays set) or when another
 * rank has failed, with a {@link dev.jnccl.CommunicatorAbortedException} that says which and, on
 * timeout or interrupt, names the ranks that did not arrive; the communicator then aborts this
 * rank, and its {@link Failures} release the others.
 */
public interface HostSide {

    /**
     * How long a host-side wait for the other ranks may take on a communicator with {@code options}:
     * the watchdog's timeout when the watchdog is on (a rank missing from a barrier is as stuck as
     * one missing from a collective), else no limit. A launcher's own waits for its peers within a
     * transaction (threads mode's copy engines) take the same bound.
     *
     * @param options the communicator's options
     * @return the timeout in nanoseconds, {@link Long#MAX_VALUE} for none
     */
    static long timeoutNanos(CommunicatorOptions options) {
        return options.watchdogEnabled() ? Deadlines.toNanos(options.watchdogTimeout()) : Long.MAX_VALUE;
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
     * Every rank's bytes, in rank order, on every rank. {@link Communicator#split} exchanges the
     * colors and keys through it too, bounded by {@link CommunicatorOptions#initTimeout()}.
     *
     * @param local        this rank's bytes (the caller keeps ownership: copy what is kept)
     * @param timeoutNanos how long to wait for the others
     * @return the bytes of every rank, arrays the caller owns (no rank sees another rank's arrays)
     */
    List<byte[]> allGather(byte[] local, long timeoutNanos);

    /**
     * The consistency check's exchange ({@code jnccl.debug=detail}): every rank's fingerprint of the
     * step it is about to run, in rank order, on every rank, as {@link #allGather}, which the default
     * is. A launcher whose host-side rendezvous pair up by their order (MPI: tags and collectives of
     * one communicator) gives the checks rendezvous of their own, so that a rank that skipped a step
     * and went on to a barrier is never paired with its peers' check of that step.
     *
     * @param fingerprint  this rank's fingerprint (the caller keeps ownership)
     * @param timeoutNanos how long to wait for the others
     * @return every rank's fingerprint, arrays the caller owns
     */
    default List<byte[]> consistencyCheck(byte[] fingerprint, long timeoutNanos) {
        return allGather(fingerprint, timeoutNanos);
    }

    /**
     * The parts of this rank's communicator of a split, after NCCL has split, on every member (a
     * rank that passed a negative color gets none). The new communicator's host side meets among
     * the members only. {@link RankEvents#beforeSplit} ran on every rank before NCCL split.
     *
     * @param membership this rank's place in the new communicator
     * @return the new communicator's parts
     * @throws UnsupportedOperationException when this launcher has no sub-communicators
     *         ({@link Communicator#split} then throws it)
     */
    RankParts split(Membership membership);

    /**
     * The parts of this rank's communicator of a {@link Communicator#shrink}, on every survivor,
     * before the survivors' communicator is made (its host side carries the new unique id of the
     * re-init path). The new host side meets among the survivors only and must never wait for an
     * excluded rank (it may be dead). {@code survivors} has color 0, this rank's old rank as key,
     * and the survivors' old ranks, in order, as members.
     *
     * @param survivors this rank's place among the survivors
     * @return the survivors' communicator's parts
     * @throws UnsupportedOperationException when this launcher cannot shrink (the default)
     */
    default RankParts shrink(Membership survivors) {
        throw new UnsupportedOperationException("shrink: this launcher cannot shrink (" + getClass().getSimpleName()
                + " has no host side for the survivors)");
    }

    /**
     * The parts of this (existing) rank's communicator of a {@link Communicator#grow}, before the
     * grown communicator is made: its host side meets this communicator's ranks (same ranks) and the
     * new ranks {@code [ticket.fromWorld(), ticket.toWorld())}, which the launcher starts with
     * {@link Modes#joinGrow} and the same ticket.
     *
     * @param existing this rank's communicator, being grown
     * @param ticket   the grow's ticket
     * @return the grown communicator's parts
     * @throws UnsupportedOperationException when this launcher cannot grow (the default)
     */
    default RankParts grow(Communicator existing, dev.jnccl.GrowTicket ticket) {
        throw new UnsupportedOperationException("grow: this launcher cannot grow (" + getClass().getSimpleName()
                + " has no host side for the grown world)");
    }
}
