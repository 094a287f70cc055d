/** A training-code-shaped consumer of jnccl, on the module path. */
module dev.jnccl.consumer {
    requires dev.jnccl.threads;
    // jnccl-spark: an automatic module (Spark, which the cluster provides, has no module names)
    requires dev.jnccl.spark;
}
