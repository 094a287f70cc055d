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
    private final MpiLibrary.Handle comm;
    private final boolean finalizeOnClose;
    private final AtomicBoolean jobAborted = new AtomicBoolean();

    MpiCommunicator(UniqueId id, int rank, int worldSize, int device, MpiOptions options, MpiLibrary mpi,
                    MpiLibrary.Handle comm, boolean finalizeOnClose) {
        super(id, rank, worldSize, device, options.communicator());
        this.mpi = mpi;
        this.comm = comm;
        this.finalizeOnClose = finalizeOnClose;
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
        mpi.abort(comm, ABORT_EXIT_CODE);
    }

    @Override
    protected void onClose() {
        if (isAborted()) {
            return; // the job was ended with MPI_Abort: no MPI call is valid any more
        }
        mpi.free(comm);
        if (finalizeOnClose) {
            MpiCommunicators.finalizeBounded(mpi, options().closeTimeout(), rank());
        }
    }
}
