package dev.jnccl.it;

import dev.jnccl.testsupport.LowPrecision;

import static org.junit.jupiter.api.Assertions.fail;

/**
 * Element-by-element checks. On the host emulation ({@code exact}) results must equal the
 * reference bit for bit; on real NCCL a relative tolerance applies (FP32 1e-5, BF16 a few ulps),
 * relative to the element's scale (the sum of the contributions' magnitudes where one is given,
 * else the expected value's magnitude). Data movement (gathers, sends, all-to-all) and integer
 * results are always exact.
 */
final class Verify {
    static final double FP32_TOLERANCE = 1e-5;
    /** bf16 has 8 significant bits; NCCL may round after each of up to 7 partial sums. */
    static final double BF16_TOLERANCE = 3e-2;
    private static final int SHOWN = 5;

    private Verify() {}

    static void floats(String what, float[] expected, float[] actual, boolean exact, double[] scale) {
        sameLength(what, expected.length, actual.length);
        int bad = 0;
        StringBuilder first = new StringBuilder();
        for (int i = 0; i < expected.length; i++) {
            float e = expected[i];
            float a = actual[i];
            boolean ok;
            if (exact || Float.isNaN(e) || Float.isInfinite(e)) {
                ok = Float.floatToIntBits(e) == Float.floatToIntBits(a);
            } else {
                double s = Math.max(Math.abs(e), scale == null ? 0 : scale[i]);
                ok = Math.abs((double) a - e) <= FP32_TOLERANCE * s;
            }
            if (!ok) {
                if (bad++ < SHOWN) {
                    first.append(String.format("%n  [%d] expected %s (0x%08x), got %s (0x%08x)", i, e,
                            Float.floatToRawIntBits(e), a, Float.floatToRawIntBits(a)));
                }
            }
        }
        report(what, bad, expected.length, exact, first);
    }

    /** Data movement: always bit-exact. */
    static void floats(String what, float[] expected, float[] actual) {
        floats(what, expected, actual, true, null);
    }

    static void bf16(String what, short[] expected, short[] actual, boolean exact, double[] scale) {
        sameLength(what, expected.length, actual.length);
        int bad = 0;
        StringBuilder first = new StringBuilder();
        for (int i = 0; i < expected.length; i++) {
            boolean ok;
            if (exact) {
                ok = expected[i] == actual[i];
            } else {
                float e = LowPrecision.bf16ToFloat(expected[i]);
                float a = LowPrecision.bf16ToFloat(actual[i]);
                double s = Math.max(Math.abs(e), scale == null ? 0 : scale[i]);
                ok = Math.abs((double) a - e) <= BF16_TOLERANCE * s;
            }
            if (!ok && bad++ < SHOWN) {
                first.append(String.format("%n  [%d] expected %s (0x%04x), got %s (0x%04x)", i,
                        LowPrecision.bf16ToFloat(expected[i]), expected[i] & 0xffff, LowPrecision.bf16ToFloat(actual[i]),
                        actual[i] & 0xffff));
            }
        }
        report(what, bad, expected.length, exact, first);
    }

    /** Data movement of bf16 values: always bit-exact. */
    static void bf16(String what, short[] expected, short[] actual) {
        bf16(what, expected, actual, true, null);
    }

    static void ints(String what, int[] expected, int[] actual) {
        sameLength(what, expected.length, actual.length);
        int bad = 0;
        StringBuilder first = new StringBuilder();
        for (int i = 0; i < expected.length; i++) {
            if (expected[i] != actual[i] && bad++ < SHOWN) {
                first.append(String.format("%n  [%d] expected %d, got %d", i, expected[i], actual[i]));
            }
        }
        report(what, bad, expected.length, true, first);
    }

    private static void sameLength(String what, int expected, int actual) {
        if (expected != actual) {
            fail(what + ": expected " + expected + " elements, got " + actual);
        }
    }

    private static void report(String what, int bad, int total, boolean exact, StringBuilder first) {
        if (bad > 0) {
            fail(what + ": " + bad + " of " + total + " elements differ (" + (exact ? "exact match required"
                    : "relative tolerance") + "); first ones:" + first);
        }
    }
}
