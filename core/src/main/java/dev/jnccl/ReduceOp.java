package dev.jnccl;

import dev.jnccl.bindings.nccl.Nccl;

/** Reduction operations, mapped to NCCL's built-in ncclRedOp_t. */
public enum ReduceOp {
    SUM(Nccl.ncclSum()),
    PROD(Nccl.ncclProd()),
    MAX(Nccl.ncclMax()),
    MIN(Nccl.ncclMin()),
    /** Sum divided by the world size (NCCL 2.10+). */
    AVG(Nccl.ncclAvg());

    private final int ncclOp;

    ReduceOp(int ncclOp) {
        this.ncclOp = ncclOp;
    }

    /** The ncclRedOp_t value. */
    public int ncclOp() {
        return ncclOp;
    }
}
