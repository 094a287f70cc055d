package dev.jnccl;

import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.bindings.nccl.ncclUniqueId;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * How jnccl's public value types look to NCCL: ncclDataType_t, ncclRedOp_t, the ncclUniqueId
 * struct, and the NCCL feature a data type needs. Kept here so that the public enums carry no
 * binding types.
 */
final class NcclTypes {
    private NcclTypes() {}

    /**
     * {@return the ncclDataType_t of {@code dtype} ({@link DType#BYTE} is ncclUint8)}
     *
     * @param dtype the type
     */
    static int of(DType dtype) {
        return switch (dtype) {
            case FP32 -> Nccl.ncclFloat32();
            case FP64 -> Nccl.ncclFloat64();
            case FP16 -> Nccl.ncclFloat16();
            case BF16 -> Nccl.ncclBfloat16();
            case FP8_E4M3 -> Nccl.ncclFloat8e4m3();
            case FP8_E5M2 -> Nccl.ncclFloat8e5m2();
            case INT8 -> Nccl.ncclInt8();
            case UINT8, BYTE -> Nccl.ncclUint8();
            case INT32 -> Nccl.ncclInt32();
            case UINT32 -> Nccl.ncclUint32();
            case INT64 -> Nccl.ncclInt64();
            case UINT64 -> Nccl.ncclUint64();
        };
    }

    /**
     * {@return the ncclRedOp_t of {@code op}}
     *
     * @param op the operation
     */
    static int of(ReduceOp op) {
        return switch (op) {
            case SUM -> Nccl.ncclSum();
            case PROD -> Nccl.ncclProd();
            case MAX -> Nccl.ncclMax();
            case MIN -> Nccl.ncclMin();
            case AVG -> Nccl.ncclAvg();
        };
    }

    /**
     * {@return the NCCL feature {@code dtype} needs beyond jnccl's minimum NCCL version, or null}
     *
     * @param dtype the type
     */
    static NcclFeature requiredFeature(DType dtype) {
        return switch (dtype) {
            case BF16 -> NcclFeature.BFLOAT16_AND_AVG;
            case FP8_E4M3, FP8_E5M2 -> NcclFeature.FP8;
            default -> null;
        };
    }

    /**
     * {@return {@code id} as an ncclUniqueId struct allocated in {@code arena} (NCCL takes it by value)}
     *
     * @param id    the unique id
     * @param arena where the struct is allocated
     */
    static MemorySegment segment(UniqueId id, Arena arena) {
        MemorySegment segment = ncclUniqueId.allocate(arena);
        MemorySegment.copy(id.bytes(), 0, segment, ValueLayout.JAVA_BYTE, 0, UniqueId.BYTES);
        return segment;
    }
}
