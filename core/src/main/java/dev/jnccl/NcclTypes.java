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
        return switch (op.kind()) {
            case SUM -> Nccl.ncclSum();
            case PROD -> Nccl.ncclProd();
            case MAX -> Nccl.ncclMax();
            case MIN -> Nccl.ncclMin();
            case AVG -> Nccl.ncclAvg();
            case SCALED_SUM -> throw new IllegalArgumentException(op + " is no NCCL built-in: the communicator"
                    + " creates it (NcclComm.preMulSum)");
        };
    }

    /**
     * {@return why {@code factor} cannot scale {@code dtype} tensors, or null when it can: a
     * floating factor must not exceed the type's largest finite value, an integer one must be a
     * whole number in the type's range}
     *
     * @param dtype  a reducible type
     * @param factor a finite factor
     */
    static String scalarProblem(DType dtype, double factor) {
        if (dtype.isFloatingPoint()) {
            double max = switch (dtype) {
                case FP64 -> Double.MAX_VALUE;
                case FP32 -> Float.MAX_VALUE;
                case FP16 -> 65504.0;
                case BF16 -> Float.intBitsToFloat(0x7f7f0000);
                case FP8_E4M3 -> 448.0;
                case FP8_E5M2 -> 57344.0;
                default -> throw new IllegalArgumentException(dtype.toString());
            };
            // FP16 and BF16 round rather than overflow up to half an ulp above their largest value,
            // but a factor that large is a mistake: the bound is the largest value itself.
            return Math.abs(factor) <= max ? null : "its magnitude exceeds the largest finite " + dtype + ", " + max;
        }
        double[] range = switch (dtype) {
            case INT8 -> new double[] {Byte.MIN_VALUE, Byte.MAX_VALUE};
            case UINT8 -> new double[] {0, 255};
            case INT32 -> new double[] {Integer.MIN_VALUE, Integer.MAX_VALUE};
            case UINT32 -> new double[] {0, 4294967295.0};
            case INT64 -> new double[] {-0x1p63, 0x1p63 - 1024}; // the largest double below 2^63
            case UINT64 -> new double[] {0, 0x1p64 - 2048}; // the largest double below 2^64
            default -> throw new IllegalArgumentException(dtype.toString());
        };
        if (factor != Math.rint(factor) || factor < range[0] || factor > range[1]) {
            return dtype + " tensors take a whole factor in [" + (long) range[0] + ", "
                    + (dtype == DType.UINT64 ? "2^64)" : (long) range[1] + "]");
        }
        return null;
    }

    /**
     * {@return {@code factor} in {@code dtype}'s encoding, in the low bytes (little endian): the scalar
     * of ncclRedOpCreatePreMulSum, which NCCL reads as a value of the operation's data type. Floating
     * types round to nearest even (FP16, BF16 and FP8 from the FP32 nearest to the factor, as CUDA's
     * conversions take a float); integers in two's complement}
     *
     * @param dtype  a reducible type
     * @param factor a factor {@link #scalarProblem} accepts
     */
    static long scalarBits(DType dtype, double factor) {
        float single = (float) factor;
        return switch (dtype) {
            case FP64 -> Double.doubleToRawLongBits(factor);
            case FP32 -> Float.floatToRawIntBits(single) & 0xFFFF_FFFFL;
            case FP16 -> Float.floatToFloat16(single) & 0xFFFFL;
            case BF16 -> {
                int bits = Float.floatToRawIntBits(single);
                yield ((bits + 0x7FFF + ((bits >>> 16) & 1)) >>> 16) & 0xFFFFL;
            }
            case FP8_E4M3 -> fp8(single, 3, 7, 0x7E);
            case FP8_E5M2 -> fp8(single, 2, 15, 0x7B);
            case UINT64 -> factor >= 0x1p63 ? (long) (factor - 0x1p63) ^ Long.MIN_VALUE : (long) factor;
            default -> (long) factor; // the low bytes are the value in the narrower integer types
        };
    }

    /** The FP8 code nearest to {@code value} (ties to the even code), among the finite ones up to {@code maxCode}. */
    private static long fp8(float value, int mantissaBits, int bias, int maxCode) {
        double magnitude = Math.abs(value);
        int best = 0;
        double bestDistance = Double.MAX_VALUE;
        for (int code = 0; code <= maxCode; code++) {
            int exponent = code >>> mantissaBits;
            int mantissa = code & ((1 << mantissaBits) - 1);
            double decoded = exponent == 0
                    ? Math.scalb((double) mantissa, 1 - bias - mantissaBits)
                    : Math.scalb((double) ((1 << mantissaBits) | mantissa), exponent - bias - mantissaBits);
            double distance = Math.abs(decoded - magnitude);
            if (distance < bestDistance || (distance == bestDistance && (code & 1) == 0)) {
                best = code;
                bestDistance = distance;
            }
        }
        return (Math.copySign(1.0f, value) < 0 ? 0x80 : 0) | best;
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
