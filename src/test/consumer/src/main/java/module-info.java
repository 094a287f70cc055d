/** A training-code-shaped consumer of jnccl, on the module path. */
module dev.jnccl.consumer {
    requires dev.jnccl.threads;
}
