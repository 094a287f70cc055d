/**
 * jnccl's native layer: the jextract-generated bindings of NCCL and the CUDA runtime, the loader
 * that decides which library files back them (real libraries or the host emulation), and the
 * version checks. Nothing here is public API: the packages are exported only to jnccl's own
 * modules, which wrap them in the API of {@code dev.jnccl.core}.
 */
module dev.jnccl.bindings {
    requires org.slf4j;

    exports dev.jnccl.bindings to dev.jnccl.core, dev.jnccl.threads, dev.jnccl.mpi, dev.jnccl.examples;
    exports dev.jnccl.bindings.nccl to dev.jnccl.core, dev.jnccl.threads, dev.jnccl.mpi, dev.jnccl.examples;
    exports dev.jnccl.bindings.cuda to dev.jnccl.core, dev.jnccl.threads, dev.jnccl.mpi, dev.jnccl.examples;
}
