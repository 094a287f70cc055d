package dev.jnccl;

/** Reduction operations: NCCL's built-in ncclRedOp_t. */
public enum ReduceOp {
    /** Sum over ranks. */
    SUM,
    /** Product over ranks. */
    PROD,
    /** Maximum over ranks. */
    MAX,
    /** Minimum over ranks. */
    MIN,
    /** Sum divided by the world size (NCCL 2.10+). */
    AVG
}
