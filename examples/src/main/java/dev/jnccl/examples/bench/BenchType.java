package dev.jnccl.examples.bench;

import dev.jnccl.DType;
import dev.jnccl.ReduceOp;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Locale;

/**
 * The data types of the benchmark under nccl-tests' names ({@code -d float}), with what the check
 * needs: random test values that every reduction of the run computes exactly (small integers, or
 * ±1/±2 for products, so the order in which NCCL combines contributions does not matter), their
 * encoding into device memory and the decoding of results. Only {@link ReduceOp#AVG} on floating
 * types is inexact (NCCL pre-multiplies by 1/n): that comparison uses a tolerance.
 */
enum BenchType {
    INT8("int8", DType.INT8, 127),
    UINT8("uint8", DType.UINT8, 255),
    INT32("int32", DType.INT32, Integer.MAX_VALUE),
    UINT32("uint32", DType.UINT32, Integer.MAX_VALUE),
    INT64("int64", DType.INT64, Long.MAX_VALUE),
    UINT64("uint64", DType.UINT64, Long.MAX_VALUE),
    HALF("half", DType.FP16, 2048),
    FLOAT("float", DType.FP32, 1L << 24),
    DOUBLE("double", DType.FP64, 1L << 53),
    BFLOAT16("bfloat16", DType.BF16, 256),
    F8E4M3("f8e4m3", DType.FP8_E4M3, 16),
    F8E5M2("f8e5m2", DType.FP8_E5M2, 8);

    /** Test values stay below this magnitude, so that they read well and sums stay fast. */
    private static final long VALUE_CAP = 1 << 20;

    private final String ncclTestsName;
    private final DType dtype;
    /** Largest integer up to which every integer is representable (signed types: the maximum). */
    private final long exactLimit;

    BenchType(String ncclTestsName, DType dtype, long exactLimit) {
        this.ncclTestsName = ncclTestsName;
        this.dtype = dtype;
        this.exactLimit = exactLimit;
    }

    /** nccl-tests' name: the {@code type} column. */
    String ncclTestsName() {
        return ncclTestsName;
    }

    DType dtype() {
        return dtype;
    }

    int size() {
        return dtype.size();
    }

    boolean isUnsigned() {
        return this == UINT8 || this == UINT32 || this == UINT64;
    }

    static BenchType byName(String name) {
        for (BenchType type : values()) {
            if (type.ncclTestsName.equals(name)) {
                return type;
            }
        }
        throw new IllegalArgumentException("unknown datatype '" + name + "'");
    }

    // ------------------------------------------------------------------ test values

    /**
     * The test value of element {@code index} of rank {@code rank}'s input for a reduction with
     * {@code op} over {@code ranks} ranks, drawn from {@code seed}: an integer small enough that
     * every partial result of the reduction is exact in this type.
     */
    long reductionValue(long seed, int rank, long index, ReduceOp op, int ranks) {
        long bits = mix(seed, rank, index);
        if (op == ReduceOp.PROD) {
            // ±1 or ±2 (never 0, so products stay informative). Integers wrap like NCCL's (the reference
            // wraps too); floating types keep |product| <= 2^ranks exact (f8e4m3 reaches 448: up to 8 ranks).
            boolean two = (isInteger() || ranks <= 8) && (bits & 2) != 0;
            long magnitude = two ? 2 : 1;
            return isUnsigned() || (bits & 1) == 0 ? magnitude : -magnitude;
        }
        long limit = Math.max(1, Math.min(VALUE_CAP, exactLimit / ranks));
        if (isUnsigned()) {
            return Long.remainderUnsigned(bits >>> 1, limit + 1);
        }
        return Long.remainderUnsigned(bits >>> 1, 2 * limit + 1) - limit;
    }

    /** Random raw bits for operations that only move data (compared bit for bit). */
    static long rawBits(long seed, int rank, long index) {
        return mix(seed, rank, index);
    }

    /** A stateless hash of (seed, rank, index): SplitMix64's finalizer. */
    private static long mix(long seed, int rank, long index) {
        long z = seed + 0x9E3779B97F4A7C15L * (index + 1) + 0xBF58476D1CE4E5B9L * (rank + 1);
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    // ------------------------------------------------------------------ encoding

    /** Stores {@code value} (an integer test value, exactly representable) as element {@code i}. */
    void putValue(MemorySegment segment, long i, long value) {
        switch (this) {
            case INT8, UINT8 -> segment.set(ValueLayout.JAVA_BYTE, i, (byte) value);
            case INT32, UINT32 -> segment.setAtIndex(ValueLayout.JAVA_INT_UNALIGNED, i, (int) value);
            case INT64, UINT64 -> segment.setAtIndex(ValueLayout.JAVA_LONG_UNALIGNED, i, value);
            case HALF -> segment.setAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i, Float.floatToFloat16(value));
            case FLOAT -> segment.setAtIndex(ValueLayout.JAVA_FLOAT_UNALIGNED, i, value);
            case DOUBLE -> segment.setAtIndex(ValueLayout.JAVA_DOUBLE_UNALIGNED, i, value);
            // Small integers are exact in bfloat16: the upper half of the float.
            case BFLOAT16 -> segment.setAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i,
                    (short) (Float.floatToRawIntBits(value) >>> 16));
            case F8E4M3, F8E5M2 -> segment.set(ValueLayout.JAVA_BYTE, i, encodeFp8(value));
        }
    }

    /** Stores the low {@link #size()} bytes of {@code bits} as element {@code i}. */
    void putBits(MemorySegment segment, long i, long bits) {
        switch (size()) {
            case 1 -> segment.set(ValueLayout.JAVA_BYTE, i, (byte) bits);
            case 2 -> segment.setAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i, (short) bits);
            case 4 -> segment.setAtIndex(ValueLayout.JAVA_INT_UNALIGNED, i, (int) bits);
            default -> segment.setAtIndex(ValueLayout.JAVA_LONG_UNALIGNED, i, bits);
        }
    }

    /** The raw bits of element {@code i}, zero-extended. */
    long getBits(MemorySegment segment, long i) {
        return switch (size()) {
            case 1 -> segment.get(ValueLayout.JAVA_BYTE, i) & 0xFFL;
            case 2 -> segment.getAtIndex(ValueLayout.JAVA_SHORT_UNALIGNED, i) & 0xFFFFL;
            case 4 -> segment.getAtIndex(ValueLayout.JAVA_INT_UNALIGNED, i) & 0xFFFF_FFFFL;
            default -> segment.getAtIndex(ValueLayout.JAVA_LONG_UNALIGNED, i);
        };
    }

    /** {@code bits} truncated to this type's width (what {@link #getBits} returns for them). */
    long truncateBits(long bits) {
        return size() == 8 ? bits : bits & ((1L << (8 * size())) - 1);
    }

    // ------------------------------------------------------------------ the reference

    /** Whether results are compared as integers (wrap-around) rather than as floating-point values. */
    boolean isInteger() {
        return !dtype.isFloatingPoint();
    }

    /** Element {@code i} as an integer of this type (sign- or zero-extended). */
    long getInteger(MemorySegment segment, long i) {
        return wrap(getBits(segment, i));
    }

    /** {@code value} wrapped to this integer type's width, as NCCL's wrap-around arithmetic leaves it. */
    long wrap(long value) {
        return switch (this) {
            case INT8 -> (byte) value;
            case UINT8 -> value & 0xFF;
            case INT32 -> (int) value;
            case UINT32 -> value & 0xFFFF_FFFFL;
            default -> value;
        };
    }

    /** Element {@code i} of a floating type, as a double. */
    double getFloating(MemorySegment segment, long i) {
        long bits = getBits(segment, i);
        return switch (this) {
            case HALF -> Float.float16ToFloat((short) bits);
            case FLOAT -> Float.intBitsToFloat((int) bits);
            case DOUBLE -> Double.longBitsToDouble(bits);
            case BFLOAT16 -> Float.intBitsToFloat((int) (bits << 16));
            case F8E4M3 -> decodeE4M3((int) bits);
            case F8E5M2 -> decodeE5M2((int) bits);
            default -> throw new IllegalStateException(this + " is not a floating type");
        };
    }

    /** Relative rounding error of one operation in this floating type (half an ulp at 1). */
    double epsilon() {
        return switch (this) {
            case HALF -> 0x1p-11;
            case FLOAT -> 0x1p-24;
            case DOUBLE -> 0x1p-53;
            case BFLOAT16 -> 0x1p-8;
            case F8E4M3 -> 0x1p-4;
            case F8E5M2 -> 0x1p-3;
            default -> 0;
        };
    }

    private static double decodeE4M3(int v) {
        int sign = (v >> 7) & 1;
        int exponent = (v >> 3) & 0xF;
        int mantissa = v & 7;
        double magnitude;
        if (exponent == 0xF && mantissa == 7) {
            return Double.NaN;
        } else if (exponent == 0) {
            magnitude = mantissa / 8.0 * 0x1p-6;
        } else {
            magnitude = (1 + mantissa / 8.0) * Math.scalb(1.0, exponent - 7);
        }
        return sign == 1 ? -magnitude : magnitude;
    }

    private static double decodeE5M2(int v) {
        int sign = (v >> 7) & 1;
        int exponent = (v >> 2) & 0x1F;
        int mantissa = v & 3;
        double magnitude;
        if (exponent == 0x1F) {
            magnitude = mantissa == 0 ? Double.POSITIVE_INFINITY : Double.NaN;
        } else if (exponent == 0) {
            magnitude = mantissa / 4.0 * 0x1p-14;
        } else {
            magnitude = (1 + mantissa / 4.0) * Math.scalb(1.0, exponent - 15);
        }
        return sign == 1 ? -magnitude : magnitude;
    }

    /** The fp8 code of an exactly representable integer test value (|value| <= 16, as the test values are). */
    private byte encodeFp8(long value) {
        byte[] codes = this == F8E4M3 ? Fp8Codes.E4M3 : Fp8Codes.E5M2;
        int slot = (int) value + Fp8Codes.RANGE;
        if (slot < 0 || slot >= codes.length || (codes[slot] == 0 && value != 0)) {
            throw new IllegalArgumentException(String.format(Locale.ROOT, "%d is not a test value of %s", value, this));
        }
        return codes[slot];
    }

    /** The codes of the integers -16..16 in both fp8 formats (0 where not exact), built once. */
    private static final class Fp8Codes {
        static final int RANGE = 16;
        static final byte[] E4M3 = table(true);
        static final byte[] E5M2 = table(false);

        private static byte[] table(boolean e4m3) {
            byte[] codes = new byte[2 * RANGE + 1];
            for (int code = 255; code >= 0; code--) { // downwards: +0 (code 0) wins over -0
                double decoded = e4m3 ? decodeE4M3(code) : decodeE5M2(code);
                if (decoded == Math.rint(decoded) && Math.abs(decoded) <= RANGE) {
                    codes[(int) decoded + RANGE] = (byte) code;
                }
            }
            return codes;
        }
    }
}
