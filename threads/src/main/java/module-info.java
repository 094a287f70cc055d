/** jnccl's threads mode: one thread per GPU inside one JVM. */
module dev.jnccl.threads {
    requires transitive dev.jnccl.core;
    requires org.slf4j;
}
