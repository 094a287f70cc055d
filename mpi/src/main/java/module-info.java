/** jnccl's MPI mode: one process per GPU under mpirun / srun. */
module dev.jnccl.mpi {
    requires transitive dev.jnccl.core;
    requires org.slf4j;
}
