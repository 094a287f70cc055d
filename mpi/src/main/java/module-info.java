/**
 * jnccl's MPI mode: one process per GPU under mpirun / srun ({@link dev.jnccl.mpi.MpiCommunicators}),
 * with Open MPI or an MPICH-ABI library (MPICH, Intel MPI, Cray MPICH, MVAPICH).
 */
module dev.jnccl.mpi {
    requires transitive dev.jnccl.core;
    requires org.slf4j;

    exports dev.jnccl.mpi;
}
