/** jnccl's public API: communicators, transactions, device tensors, CUDA streams and events, errors. */
module dev.jnccl.core {
    requires transitive dev.jnccl.bindings;
    requires org.slf4j;
}
