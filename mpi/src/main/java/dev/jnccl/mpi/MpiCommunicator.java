package dev.jnccl.mpi;

import dev.jnccl.Communicator;
import dev.jnccl.UniqueId;
import dev.jnccl.mpi.internal.MpiLibrary;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * This process's rank under MPI: barrier and host gathers over its own MPI communicator (a
 * duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so jnccl's messages never mix with the
 * application's and its error handling leaves the application's communicators alone). No
 * launch-queue throttle: one process drives one GPU. After an abort (watchdog, failed transaction,
 * {@link #abort}) it ends the whole job with MPI_Abort; a clean {@link #close()} frees the MPI
 * communicator and finalizes MPI if jnccl initialised it.
 */
final class MpiCommunicator extends Communicator {
    private static final Logger LOG = LoggerFactory.getLogger(MpiCommunicator.class);
    /** The exit code of a job ended by a failing rank. */
    static final int ABORT_EXIT_CODE = 1;

    private final MpiLibrary mpi;
    /** This communicator's host collectives: jnccl's duplicate of MPI_COMM_WORLD, or a split of it. */
    private final MpiLibrary.Handle comm;
    /** Where MPI_Abort goes: the duplicate of MPI_COMM_WORLD, so that a failing child ends the whole job. */
    private final MpiLibrary.Handle job;
    private final boolean finalizeOnClose;
    /** One per process (shared with the children): MPI_Abort once. */
    private final AtomicBoolean jobAborted;
    /** The MPI side of the split in progress ({@link #beforeSplit}), taken by {@link #newChild}. */
    private MpiLibrary.Handle pendingSplit;

    MpiCommunicator(UniqueId id, int rank, int worldSize, int device, MpiOptions options, MpiLibrary mpi,
                    MpiLibrary.Handle comm, boolean finalizeOnClose) {
        super(id, rank, worldSize, device, options.communicator());
        this.mpi = mpi;
        this.comm = comm;
        this.job = comm;
        this.finalizeOnClose = finalizeOnClose;
        this.jobAborted = new AtomicBoolean();
    }

    /** A member of a split: host collectives over {@code comm}, the MPI split of the same colors and keys. */
    private MpiCommunicator(Split split, MpiCommunicator parent, MpiLibrary.Handle comm) {
        super(split);
        this.mpi = parent.mpi;
        this.comm = comm;
        this.job = parent.job;
        this.finalizeOnClose = false;
        this.jobAborted = parent.jobAborted;
    }

    /**
     * MPI_Comm_split needs every rank of this communicator, members of the NCCL split or not: same
     * colors (negative: MPI_UNDEFINED), same keys, so that MPI orders the members as NCCL does (by
     * key, then by rank here).
     */
    @Override
    protected void beforeSplit(int color, int key) {
        MpiLibrary.Handle previous = pendingSplit;
        pendingSplit = null;
        if (previous != null && !previous.equals(mpi.commNull())) {
            mpi.free(previous); // a split whose NCCL part failed on this rank
        }
        pendingSplit = mpi.split(comm, color < 0 ? MpiLibrary.UNDEFINED : color, key);
    }

    @Override
    protected Communicator newChild(Split split) {
        MpiLibrary.Handle childComm = pendingSplit;
        pendingSplit = null;
        if (childComm == null || childComm.equals(mpi.commNull())) {
            throw new IllegalStateException("split: rank " + rank() + " is a member of color " + split.color()
                    + " for NCCL but MPI_Comm_split gave it no communicator");
        }
        int mpiRank = mpi.rank(childComm);
        if (mpiRank != split.rank() || mpi.size(childComm) != split.worldSize()) {
            mpi.free(childComm);
            throw new IllegalStateException("split: NCCL made rank " + split.rank() + " of " + split.worldSize()
                    + " but MPI_Comm_split rank " + mpiRank + " of " + mpi.size(childComm));
        }
        return new MpiCommunicator(split, this, childComm);
    }

    @Override
    protected void hostBarrier() {
        mpi.barrier(comm);
    }

    @Override
    protected List<byte[]> hostGather(byte[] local, int root) {
        return mpi.gather(local, root, comm);
    }

    @Override
    protected List<byte[]> hostAllGather(byte[] local) {
        return mpi.allGather(local, comm);
    }

    /** The NCCL communicator is aborted: end the job, or peers blocked in NCCL or MPI would wait forever. */
    @Override
    protected void afterAbort(String reason) {
        abortJob(reason);
    }

    /** MPI_Abort once per process (it normally does not return). */
    void abortJob(String reason) {
        if (!jobAborted.compareAndSet(false, true)) {
            return;
        }
        LOG.error("rank {} of {}: ending the MPI job (MPI_Abort, exit code {}): {}", rank(), worldSize(),
                ABORT_EXIT_CODE, reason);
        mpi.abort(job, ABORT_EXIT_CODE);
    }

    @Override
    protected void onClose() {
        if (isAborted()) {
            return; // the job was ended with MPI_Abort: no MPI call is valid any more
        }
        if (pendingSplit != null && !pendingSplit.equals(mpi.commNull())) {
            mpi.free(pendingSplit);
        }
        mpi.free(comm);
        if (finalizeOnClose) {
            MpiCommunicators.finalizeBounded(mpi, options().closeTimeout(), rank());
        }
    }
}
