package dev.jnccl;

import dev.jnccl.bindings.nccl.Nccl;

/** Reduction operations, mapped to NCCL's built-in ncclRedOp_t. */
public enum ReduceOp {
    /** Sum. */
    SUM(Nccl.ncclSum()),
    /** Product. */
    PROD(Nccl.ncclProd()),
    /** Maximum. */
    MAX(Nccl.ncclMax()),
    /** Minimum. */
    MIN(Nccl.ncclMin()),
    /** Sum divided by the world size (NCCL 2.10+). */
    AVG(Nccl.ncclAvg());

    private final int ncclOp;

    ReduceOp(int ncclOp) {
        this.ncclOp = ncclOp;
    }

    /** {@return the ncclRedOp_t value} */
    public int ncclOp() {
        return ncclOp;
    }
}
