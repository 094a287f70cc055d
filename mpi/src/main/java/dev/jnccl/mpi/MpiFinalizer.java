package dev.jnccl.mpi;

import dev.jnccl.mpi.internal.MpiLibrary;
import java.time.Duration;

/**
 * MPI_Finalize when jnccl initialised MPI, once the last communicator that needs MPI is closed: the
 * job's first communicator, and the survivors' communicators made from it after a lost rank (each
 * holds MPI until it is closed, in whatever order the application closes them).
 */
final class MpiFinalizer {
    private final Duration timeout;
    private int holders = 1;

    /** A finalizer held by the job's first communicator; {@code timeout} bounds MPI_Finalize. */
    MpiFinalizer(Duration timeout) {
        this.timeout = timeout;
    }

    /** One more communicator needs MPI until it releases it. */
    synchronized void hold() {
        holders++;
    }

    /** A communicator is closed: MPI_Finalize (bounded) when it was the last that needed MPI. */
    void release(MpiLibrary mpi, int rank) {
        synchronized (this) {
            if (--holders > 0) {
                return;
            }
        }
        MpiCommunicators.finalizeBounded(mpi, timeout, rank);
    }
}
