package dev.jnccl.spi;

import dev.jnccl.Communicator;

/**
 * Where a launcher joins in at the points of a rank's communicator's life: made, before each
 * transaction, before each split, closing, closed. Every method does nothing by default; a launcher
 * overrides what it needs (threads mode paces the ranks of one process and tracks its pack, MPI mode
 * exchanges how far each rank got when closing and frees its MPI communicators). How a failure
 * reaches the other ranks is {@link Failures}'s.
 *
 * <p>Calls come from the threads that use the communicator (create, execute, split, close it), in
 * this order: {@link #attached} once, {@link #pace} and {@link #beforeSplit} any number of times,
 * {@link #closing} at most once (not after an abort), {@link #closed} at most once, last.
 */
public interface RankEvents {

    /** The events of a launcher that joins in at none of these points. */
    RankEvents NONE = new RankEvents() {};

    /**
     * Called once, when the communicator these parts serve is ready to use. An exception refuses it:
     * the communicator is aborted and closed, and its creation throws that exception.
     *
     * @param communicator the communicator
     */
    default void attached(Communicator communicator) {}

    /**
     * Called before each transaction, outside the communicator's lock (not for one captured into a
     * CUDA graph: each replay is paced instead): where a launcher keeps one rank from queuing far
     * ahead of the others (threads mode: the ranks share one process's launch queue). A wait here is
     * a host-side wait for the other ranks (see {@link HostSide}).
     *
     * @param timeoutNanos how long to wait for the others
     */
    default void pace(long timeoutNanos) {}

    /**
     * Called on every rank of the communicator, member of the new communicator or not (negative
     * color), for each split, after the colors and keys were exchanged and before NCCL splits:
     * where the host side needs every rank for its own split (MPI_Comm_split) or counts splits. The
     * members then get {@link HostSide#split}.
     *
     * @param color the color this rank passed to {@link Communicator#split}
     * @param key   the key this rank passed
     */
    default void beforeSplit(int color, int key) {}

    /**
     * Called by {@link Communicator#close()} on an open communicator before NCCL is finalized:
     * where the launcher tells the other ranks how far this rank got, and waits (within
     * {@code timeoutNanos}) until they are closing too.
     *
     * @param executed     the transactions this rank has executed
     * @param timeoutNanos how long to wait for the other ranks (what is left of the close timeout)
     * @return null when every rank is closing; else why not (the communicator is aborted instead)
     */
    default String closing(long executed, long timeoutNanos) {
        return null;
    }

    /**
     * Called once by {@link Communicator#close()} after NCCL is done with the comms stream and the
     * transport is closed: free the launcher's resources of this rank.
     *
     * @param aborted whether the communicator was aborted (MPI mode: no MPI call is valid then)
     */
    default void closed(boolean aborted) {}
}
