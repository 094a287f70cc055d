package dev.jnccl;

import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.bindings.nccl.Nccl;

/** Element types of device tensors, mapped to ncclDataType_t. */
public enum DType {
    /** 32-bit IEEE 754 floating point. */
    FP32(Nccl.ncclFloat32(), 4, true, null),
    /** 64-bit IEEE 754 floating point. */
    FP64(Nccl.ncclFloat64(), 8, true, null),
    /** 16-bit IEEE 754 floating point (half). */
    FP16(Nccl.ncclFloat16(), 2, true, null),
    /** bfloat16 (needs NCCL with bfloat16 support). */
    BF16(Nccl.ncclBfloat16(), 2, true, NcclFeature.BFLOAT16_AND_AVG),
    /** 8-bit float, 4 exponent and 3 mantissa bits (OCP "fn": no infinities). Needs NCCL 2.24+. */
    FP8_E4M3(Nccl.ncclFloat8e4m3(), 1, true, NcclFeature.FP8),
    /** 8-bit float, 5 exponent and 2 mantissa bits. Needs NCCL 2.24+. */
    FP8_E5M2(Nccl.ncclFloat8e5m2(), 1, true, NcclFeature.FP8),
    /** Signed 8-bit integer. */
    INT8(Nccl.ncclInt8(), 1, false, null),
    /** Unsigned 8-bit integer. */
    UINT8(Nccl.ncclUint8(), 1, false, null),
    /** Signed 32-bit integer. */
    INT32(Nccl.ncclInt32(), 4, false, null),
    /** Unsigned 32-bit integer. */
    UINT32(Nccl.ncclUint32(), 4, false, null),
    /** Signed 64-bit integer. */
    INT64(Nccl.ncclInt64(), 8, false, null),
    /** Unsigned 64-bit integer. */
    UINT64(Nccl.ncclUint64(), 8, false, null),
    /** Raw bytes: moved (gather, send, all-to-all) but never reduced. */
    BYTE(Nccl.ncclUint8(), 1, false, null);

    private final int ncclType;
    private final int size;
    private final boolean floating;
    private final NcclFeature feature;

    DType(int ncclType, int size, boolean floating, NcclFeature feature) {
        this.ncclType = ncclType;
        this.size = size;
        this.floating = floating;
        this.feature = feature;
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

    /** {@return the ncclDataType_t value} */
    public int ncclType() {
        return ncclType;
    }

    /** {@return the NCCL feature this type needs beyond the minimum version, or null} */
    public NcclFeature requiredFeature() {
        return feature;
    }
}
