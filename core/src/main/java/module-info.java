/**
 * jnccl's public API: {@link dev.jnccl.Communicator} and its transactions, device tensors and
 * data types ({@code dev.jnccl}), and CUDA streams, events and device memory ({@code dev.jnccl.cuda}).
 */
module dev.jnccl.core {
    requires transitive dev.jnccl.bindings;
    requires org.slf4j;
    requires jdk.jfr;

    exports dev.jnccl;
    exports dev.jnccl.cuda;
    // The seam between Communicator and the launchers: only the launcher modules implement it.
    exports dev.jnccl.spi to dev.jnccl.threads, dev.jnccl.mpi, dev.jnccl.spark;
    // The bottom layer (no API types): deadlines, back-off and option checks for the launchers' own code.
    exports dev.jnccl.internal to dev.jnccl.threads, dev.jnccl.mpi, dev.jnccl.spark;
}
