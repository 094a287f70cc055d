package dev.jnccl.testsupport;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/** The bf16 reference conversion against hand-computed values and an independent nearest-value search. */
class LowPrecisionTest {

    @Test
    void everyNanBecomesTheCanonicalQuietNan() {
        // Positive and negative quiet NaNs, signalling NaNs, and NaNs whose payload is only in the low
        // 16 bits (truncation would turn those into infinity): CUDA answers 0x7FFF for all of them.
        int[] nans = {0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7F80FFFF, 0x7FBFFFFF, 0x7FFFFFFF, 0xFFFFFFFF,
            0x7FA5A5A5};
        for (int bits : nans) {
            float nan = Float.intBitsToFloat(bits);
            assertTrue(Float.isNaN(nan), "test input 0x" + Integer.toHexString(bits) + " is not a NaN");
            assertEquals(0x7FFF, LowPrecision.floatToBf16(nan) & 0xFFFF,
                    "bf16 of NaN 0x" + Integer.toHexString(bits));
        }
        float back = LowPrecision.bf16ToFloat(LowPrecision.BF16_NAN);
        assertTrue(Float.isNaN(back), "0x7FFF decodes to " + back);
        // Quiet: the most significant mantissa bit (float bit 22) is set.
        assertEquals(0x00400000, Float.floatToRawIntBits(back) & 0x00400000, "0x7FFF is not a quiet NaN");
    }

    @Test
    void roundsToNearestEvenAndOverflowsToInfinity() {
        assertEquals(0x3F80, LowPrecision.floatToBf16(1f + 0x1p-8f) & 0xFFFF);      // tie -> even (1.0)
        assertEquals(0x3F82, LowPrecision.floatToBf16(1f + 3 * 0x1p-8f) & 0xFFFF);  // tie -> even (up)
        assertEquals(0x7F80, LowPrecision.floatToBf16(Float.MAX_VALUE) & 0xFFFF);   // rounds up to +inf
        assertEquals(0xFF80, LowPrecision.floatToBf16(Float.NEGATIVE_INFINITY) & 0xFFFF);
        assertEquals(0x8000, LowPrecision.floatToBf16(-0f) & 0xFFFF);
    }

    @Test
    void randomFloatsGoToTheNearestBf16() {
        SplittableRandom random = new SplittableRandom(0x5EED_BF16L);
        for (int i = 0; i < 200_000; i++) {
            int bits = random.nextInt();
            float value = Float.intBitsToFloat(bits);
            if (Float.isNaN(value) || Float.isInfinite(value)) {
                continue;
            }
            int expected = nearestBf16(value);
            assertEquals(expected, LowPrecision.floatToBf16(value) & 0xFFFF,
                    "bf16 of " + value + " [0x" + Integer.toHexString(bits) + "]");
        }
    }

    /**
     * The reference, by another route: the two bf16 values around {@code value} (truncation and the
     * next one away from zero), the nearer in double arithmetic (exact for these magnitudes), the
     * even one on a tie; past the largest finite bf16, the rounding may reach infinity.
     */
    private static int nearestBf16(float value) {
        int bits = Float.floatToRawIntBits(value);
        int down = bits >>> 16;
        int up = down + 1; // the next magnitude (the exponent carries, 0x7F7F + 1 = infinity)
        double a = Math.abs((double) value);
        double low = Math.abs((double) LowPrecision.bf16ToFloat((short) down));
        double high = Math.abs((double) LowPrecision.bf16ToFloat((short) up));
        if (Double.isInfinite(high)) {
            // Halfway to the (unrepresentable) next step 2^128 counts as the midpoint.
            high = Math.scalb(1.0, 128);
        }
        double toLow = a - low;
        double toHigh = high - a;
        if (toLow < toHigh) {
            return down;
        }
        if (toHigh < toLow) {
            return up;
        }
        return (down & 1) == 0 ? down : up;
    }
}
