/** Example programs and benchmarks for jnccl. */
module dev.jnccl.examples {
    requires dev.jnccl.threads;
    requires dev.jnccl.mpi;
}
