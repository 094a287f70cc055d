package dev.jnccl;

/**
 * Element types of device tensors (NCCL's ncclDataType_t). Types newer than jnccl's minimum NCCL
 * need a newer library: {@link JncclRuntime#supports(DType)} tells whether the loaded one has them.
 */
public enum DType {
    /** 32-bit IEEE float. */
    FP32(4, true),
    /** 64-bit IEEE float. */
    FP64(8, true),
    /** 16-bit IEEE float (binary16). */
    FP16(2, true),
    /** bfloat16: the upper half of an FP32 (8 exponent, 7 mantissa bits). Needs NCCL 2.10+. */
    BF16(2, true),
    /** 8-bit float, 4 exponent and 3 mantissa bits (OCP "fn": no infinities). Needs NCCL 2.24+. */
    FP8_E4M3(1, true),
    /** 8-bit float, 5 exponent and 2 mantissa bits. Needs NCCL 2.24+. */
    FP8_E5M2(1, true),
    /** Signed 8-bit integer. */
    INT8(1, false),
    /** Unsigned 8-bit integer. */
    UINT8(1, false),
    /** Signed 32-bit integer. */
    INT32(4, false),
    /** Unsigned 32-bit integer. */
    UINT32(4, false),
    /** Signed 64-bit integer. */
    INT64(8, false),
    /** Unsigned 64-bit integer. */
    UINT64(8, false),
    /** Raw bytes: moved (gather, send, all-to-all) but never reduced. */
    BYTE(1, false);

    private final int size;
    private final boolean floating;

    DType(int size, boolean floating) {
        this.size = size;
        this.floating = floating;
    }

    /** {@return the bytes per element} */
    public int size() {
        return size;
    }

    /** {@return whether this is a floating-point type} */
    public boolean isFloatingPoint() {
        return floating;
    }

    /** {@return whether reductions (reduce-scatter, all-reduce) are defined on it: every type but {@link #BYTE}} */
    public boolean isReducible() {
        return this != BYTE;
    }
}
