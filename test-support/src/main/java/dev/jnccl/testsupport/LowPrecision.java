package dev.jnccl.testsupport;

/**
 * Bit-exact conversions between float and the low-precision types of NCCL (fp16, bf16, fp8 e4m3,
 * fp8 e5m2), written independently of the emulation so that tests can check it: round to nearest
 * even; fp8 saturates to the largest finite value (OCP "satfinite"); NaN stays NaN. For bf16 that
 * NaN is CUDA's canonical quiet NaN 0x7FFF whatever the input's sign and payload, as
 * {@code __float2bfloat16_rn} returns (cuda_bf16.hpp) and the host emulation computes.
 */
public final class LowPrecision {
    private LowPrecision() {}

    /** Largest finite fp8 e4m3 (0x7E: 1.75 * 2^8). */
    public static final float E4M3_MAX = 448f;
    /** Largest finite fp8 e5m2 (0x7B: 1.75 * 2^15). */
    public static final float E5M2_MAX = 57344f;

    // ------------------------------------------------------------------ fp16

    /** IEEE binary16 bits as a float (exact). */
    public static float halfToFloat(short bits) {
        return Float.float16ToFloat(bits);
    }

    /** IEEE binary16, round to nearest even; overflow gives infinity, like a GPU's __float2half_rn. */
    public static short floatToHalf(float value) {
        return Float.floatToFloat16(value);
    }

    // ------------------------------------------------------------------ bf16

    /** bf16 bits as a float (exact: the bits are the float's upper half). */
    public static float bf16ToFloat(short bits) {
        return Float.intBitsToFloat((bits & 0xFFFF) << 16);
    }

    /** bf16's canonical quiet NaN, CUDA's answer for every NaN input. */
    public static final short BF16_NAN = 0x7FFF;

    /**
     * The upper half of a float, rounded to nearest even, like {@code __float2bfloat16_rn}: overflow
     * rounds to infinity, and any NaN becomes {@link #BF16_NAN} (plain truncation could turn a NaN
     * whose payload sits in the low bits into infinity).
     */
    public static short floatToBf16(float value) {
        int bits = Float.floatToRawIntBits(value);
        if (Float.isNaN(value)) {
            return BF16_NAN;
        }
        int rounding = 0x7FFF + ((bits >>> 16) & 1);
        return (short) ((bits + rounding) >>> 16);
    }

    // ------------------------------------------------------------------ fp8

    /** fp8 e4m3 ("FN": no infinities, S.1111.111 is NaN, bias 7). */
    public static float e4m3ToFloat(byte bits) {
        return fp8ToFloat(bits & 0xFF, 4, 3, 7, false);
    }

    /** fp8 e5m2 (IEEE-like: bias 15, exponent 31 is infinity / NaN). */
    public static float e5m2ToFloat(byte bits) {
        return fp8ToFloat(bits & 0xFF, 5, 2, 15, true);
    }

    /** To fp8 e4m3, round to nearest even, saturating at {@link #E4M3_MAX}; NaN gives 0x7F. */
    public static byte floatToE4m3(float value) {
        return floatToFp8(value, 4, 3, 7, E4M3_MAX, (byte) 0x7F);
    }

    /** To fp8 e5m2, round to nearest even, saturating at {@link #E5M2_MAX}; NaN gives 0x7F. */
    public static byte floatToE5m2(float value) {
        return floatToFp8(value, 5, 2, 15, E5M2_MAX, (byte) 0x7F);
    }

    private static float fp8ToFloat(int bits, int expBits, int manBits, int bias, boolean ieee) {
        boolean negative = (bits & 0x80) != 0;
        int exponent = (bits >>> manBits) & ((1 << expBits) - 1);
        int mantissa = bits & ((1 << manBits) - 1);
        int maxExponent = (1 << expBits) - 1;
        double magnitude;
        if (ieee && exponent == maxExponent) {
            magnitude = mantissa == 0 ? Double.POSITIVE_INFINITY : Double.NaN;
        } else if (!ieee && exponent == maxExponent && mantissa == (1 << manBits) - 1) {
            magnitude = Double.NaN;
        } else if (exponent == 0) {
            magnitude = Math.scalb((double) mantissa, 1 - bias - manBits);
        } else {
            magnitude = Math.scalb((double) ((1 << manBits) | mantissa), exponent - bias - manBits);
        }
        if (Double.isNaN(magnitude)) {
            return Float.NaN;
        }
        return (float) (negative ? -magnitude : magnitude);
    }

    private static byte floatToFp8(float value, int expBits, int manBits, int bias, float maxFinite, byte nan) {
        if (Float.isNaN(value)) {
            return nan;
        }
        int sign = Float.floatToRawIntBits(value) < 0 ? 0x80 : 0;
        double a = Math.abs((double) value);
        int minNormalExponent = 1 - bias;
        double rounded;
        if (a >= maxFinite) {
            rounded = maxFinite; // saturate (infinity included)
        } else {
            int e = Math.max(Math.getExponent(a), minNormalExponent); // subnormals share the smallest quantum
            double quantum = Math.scalb(1.0, e - manBits);
            rounded = Math.rint(a / quantum) * quantum; // exact scaling, round half to even
            if (rounded > maxFinite) {
                rounded = maxFinite;
            }
        }
        if (rounded == 0) {
            return (byte) sign;
        }
        int e = Math.getExponent(rounded);
        int exponentField;
        int mantissa;
        if (e < minNormalExponent) {
            exponentField = 0;
            mantissa = (int) Math.scalb(rounded, -(minNormalExponent - manBits));
        } else {
            exponentField = e + bias;
            mantissa = (int) (Math.scalb(rounded, manBits - e)) - (1 << manBits);
        }
        return (byte) (sign | (exponentField << manBits) | mantissa);
    }
}
