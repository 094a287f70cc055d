package dev.jnccl.mpi;

import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.Membership;
import dev.jnccl.spi.RankParts;
import dev.jnccl.spi.Transport;
import dev.jnccl.mpi.internal.MpiLibrary;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The host side of this process's rank under MPI: barrier and host gathers over its own MPI
 * communicator (a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so jnccl's messages never mix
 * with the application's and its error handling leaves the application's communicators alone). No
 * launch-queue pace: one process drives one GPU. After an abort (watchdog, failed transaction,
 * {@code abort}) it ends the whole job with MPI_Abort; a clean close frees the MPI communicator and
 * finalizes MPI if jnccl initialised it.
 */
final class MpiHost implements HostSide {
    private static final Logger LOG = LoggerFactory.getLogger(MpiHost.class);
    /** The exit code of a job ended by a failing rank. */
    static final int ABORT_EXIT_CODE = 1;

    private final MpiLibrary mpi;
    /** This communicator's host collectives: jnccl's duplicate of MPI_COMM_WORLD, or a split of it. */
    private final MpiLibrary.Handle comm;
    /** Where MPI_Abort goes: the duplicate of MPI_COMM_WORLD, so that a failing child ends the whole job. */
    private final MpiLibrary.Handle job;
    /** Null, or how long MPI_Finalize may take when this (the job's first) communicator closes. */
    private final Duration finalizeTimeout;
    /** One per process (shared with the children): MPI_Abort once. */
    private final AtomicBoolean jobAborted;
    private final int rank;
    private final int worldSize;
    /** The MPI side of the split in progress ({@link #beforeSplit}), taken by {@link #split}. */
    private MpiLibrary.Handle pendingSplit;

    private MpiHost(MpiLibrary mpi, MpiLibrary.Handle comm, MpiLibrary.Handle job, Duration finalizeTimeout,
                    AtomicBoolean jobAborted, int rank, int worldSize) {
        this.mpi = mpi;
        this.comm = comm;
        this.job = job;
        this.finalizeTimeout = finalizeTimeout;
        this.jobAborted = jobAborted;
        this.rank = rank;
        this.worldSize = worldSize;
    }

    /**
     * The parts of this process's communicator over {@code comm} (jnccl's duplicate of
     * MPI_COMM_WORLD), NCCL moving every command.
     *
     * @param finalizeTimeout null, or the bound of MPI_Finalize when jnccl initialised MPI
     */
    static RankParts parts(MpiLibrary mpi, MpiLibrary.Handle comm, int rank, int worldSize, Duration finalizeTimeout) {
        return new RankParts(new MpiHost(mpi, comm, comm, finalizeTimeout, new AtomicBoolean(), rank, worldSize),
                Transport.NCCL);
    }

    @Override
    public void barrier(long timeoutNanos) {
        mpi.barrier(comm);
    }

    @Override
    public List<byte[]> gather(byte[] local, int root, long timeoutNanos) {
        return mpi.gather(local, root, comm);
    }

    @Override
    public List<byte[]> allGather(byte[] local, long timeoutNanos) {
        return mpi.allGather(local, comm);
    }

    /**
     * MPI_Comm_split needs every rank of this communicator, members of the NCCL split or not: same
     * colors (negative: MPI_UNDEFINED), same keys, so that MPI orders the members as NCCL does (by
     * key, then by rank here).
     */
    @Override
    public void beforeSplit(int color, int key) {
        MpiLibrary.Handle previous = pendingSplit;
        pendingSplit = null;
        if (previous != null && !previous.equals(mpi.commNull())) {
            mpi.free(previous); // a split whose NCCL part failed on this rank
        }
        pendingSplit = mpi.split(comm, color < 0 ? MpiLibrary.UNDEFINED : color, key);
    }

    /** A member of a split: host collectives over the MPI split of the same colors and keys. */
    @Override
    public RankParts split(Membership membership) {
        MpiLibrary.Handle childComm = pendingSplit;
        pendingSplit = null;
        if (childComm == null || childComm.equals(mpi.commNull())) {
            throw new IllegalStateException("split: rank " + rank + " is a member of color " + membership.color()
                    + " for NCCL but MPI_Comm_split gave it no communicator");
        }
        int mpiRank = mpi.rank(childComm);
        if (mpiRank != membership.rank() || mpi.size(childComm) != membership.worldSize()) {
            mpi.free(childComm);
            throw new IllegalStateException("split: NCCL made rank " + membership.rank() + " of "
                    + membership.worldSize() + " but MPI_Comm_split rank " + mpiRank + " of " + mpi.size(childComm));
        }
        return new RankParts(new MpiHost(mpi, childComm, job, null, jobAborted, membership.rank(),
                membership.worldSize()), Transport.NCCL);
    }

    /** The NCCL communicator is aborted: end the job, or peers blocked in NCCL or MPI would wait forever. */
    @Override
    public void aborted(String reason) {
        abortJob(reason);
    }

    /** MPI_Abort once per process (it normally does not return). */
    private void abortJob(String reason) {
        if (!jobAborted.compareAndSet(false, true)) {
            return;
        }
        LOG.error("rank {} of {}: ending the MPI job (MPI_Abort, exit code {}): {}", rank, worldSize,
                ABORT_EXIT_CODE, reason);
        mpi.abort(job, ABORT_EXIT_CODE);
    }

    @Override
    public void closed(boolean aborted) {
        if (aborted) {
            return; // the job was ended with MPI_Abort: no MPI call is valid any more
        }
        if (pendingSplit != null && !pendingSplit.equals(mpi.commNull())) {
            mpi.free(pendingSplit);
        }
        mpi.free(comm);
        if (finalizeTimeout != null) {
            MpiCommunicators.finalizeBounded(mpi, finalizeTimeout, rank);
        }
    }
}
