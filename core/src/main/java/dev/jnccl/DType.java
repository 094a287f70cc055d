package dev.jnccl;

import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.bindings.nccl.Nccl;

/** Element types of device tensors, mapped to ncclDataType_t. */
public enum DType {
    FP32(Nccl.ncclFloat32(), 4, true, null),
    FP64(Nccl.ncclFloat64(), 8, true, null),
    FP16(Nccl.ncclFloat16(), 2, true, null),
    BF16(Nccl.ncclBfloat16(), 2, true, NcclFeature.BFLOAT16_AND_AVG),
    /** 8-bit float, 4 exponent and 3 mantissa bits (OCP "fn": no infinities). Needs NCCL 2.24+. */
    FP8_E4M3(Nccl.ncclFloat8e4m3(), 1, true, NcclFeature.FP8),
    /** 8-bit float, 5 exponent and 2 mantissa bits. Needs NCCL 2.24+. */
    FP8_E5M2(Nccl.ncclFloat8e5m2(), 1, true, NcclFeature.FP8),
    INT8(Nccl.ncclInt8(), 1, false, null),
    UINT8(Nccl.ncclUint8(), 1, false, null),
    INT32(Nccl.ncclInt32(), 4, false, null),
    UINT32(Nccl.ncclUint32(), 4, false, null),
    INT64(Nccl.ncclInt64(), 8, false, null),
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

    /** Bytes per element. */
    public int size() {
        return size;
    }

    /** Whether this is a floating-point type. */
    public boolean isFloatingPoint() {
        return floating;
    }

    /** Whether reductions (reduce-scatter, all-reduce) are defined on it: every type but {@link #BYTE}. */
    public boolean isReducible() {
        return this != BYTE;
    }

    /** The ncclDataType_t value. */
    public int ncclType() {
        return ncclType;
    }

    /** The NCCL feature this type needs beyond the minimum version, or null. */
    public NcclFeature requiredFeature() {
        return feature;
    }
}
