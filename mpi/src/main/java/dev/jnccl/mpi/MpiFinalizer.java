package dev.jnccl.mpi;

import dev.jnccl.mpi.internal.MpiLibrary;
import java.time.Duration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * MPI_Finalize when jnccl initialised MPI, once the last communicator that needs MPI is closed: the
 * job's first communicator, and the survivors' communicators made from it after a lost rank (each
 * holds MPI until it is closed, in whatever order the application closes them).
 *
 * <p>Not after a lost process: Open MPI 4.1's MPI_Finalize (with {@code mpirun --enable-recovery})
 * was seen waiting for the dead process in one job of three here, until the bound halted the
 * survivors with exit code 1; a survivor that exits without it ends normally, and mpirun exits 0
 * (docs/elastic-mpi.md). So once a loss is known the survivors leave MPI unfinalized.
 */
final class MpiFinalizer {
    private static final Logger LOG = LoggerFactory.getLogger(MpiFinalizer.class);
    private final Duration timeout;
    private int holders = 1;
    /** Why MPI is not to be finalized (a process of the job was lost), or null. */
    private String skip;

    /** A finalizer held by the job's first communicator; {@code timeout} bounds MPI_Finalize. */
    MpiFinalizer(Duration timeout) {
        this.timeout = timeout;
    }

    /** One more communicator needs MPI until it releases it. */
    synchronized void hold() {
        holders++;
    }

    /** A process of the job was lost ({@code why}): MPI is not finalized. */
    synchronized void lost(String why) {
        skip = why;
    }

    /** A communicator is closed: MPI_Finalize (bounded) when it was the last that needed MPI. */
    void release(MpiLibrary mpi, int rank) {
        String skipped;
        synchronized (this) {
            if (--holders > 0) {
                return;
            }
            skipped = skip;
        }
        if (skipped != null) {
            LOG.info("rank {}: MPI_Finalize skipped after a lost process ({}): it can wait for the dead process",
                    rank, skipped);
            return;
        }
        MpiCommunicators.finalizeBounded(mpi, timeout, rank);
    }
}
