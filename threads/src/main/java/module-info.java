/**
 * jnccl's threads mode: one thread per GPU inside one JVM ({@link dev.jnccl.threads.ThreadsCommunicators}).
 */
module dev.jnccl.threads {
    requires transitive dev.jnccl.core;
    requires org.slf4j;

    exports dev.jnccl.threads;
}
