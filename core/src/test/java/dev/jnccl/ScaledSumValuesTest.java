package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.testsupport.LowPrecision;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * {@link ReduceOp} as a value (the built-ins, {@link ReduceOp#scaledSum}'s check, equality) and the
 * scalar NCCL is given for a scaled sum: the factor in the tensor type's encoding, rounded to
 * nearest even as CUDA's conversions from FP32 do, compared with the test-support conversions.
 */
class ScaledSumValuesTest {

    @Test
    void builtInsAndScaledSums() {
        assertEquals(List.of(ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.AVG), List.of(ReduceOp.values()));
        assertEquals(ReduceOp.AVG, ReduceOp.valueOf("AVG"));
        assertEquals("MAX", ReduceOp.MAX.name());
        assertThrows(IllegalArgumentException.class, () -> ReduceOp.valueOf("SCALED_SUM"));
        assertEquals("AVG", ReduceOp.AVG.toString());
        assertEquals(ReduceOp.Kind.MIN, ReduceOp.MIN.kind());
        ReduceOp half = ReduceOp.scaledSum(0.5);
        assertEquals(ReduceOp.Kind.SCALED_SUM, half.kind());
        assertEquals(0.5, half.factor());
        assertEquals("SCALED_SUM(0.5)", half.toString());
        assertEquals(half, ReduceOp.scaledSum(0.5));
        assertEquals(half.hashCode(), ReduceOp.scaledSum(0.5).hashCode());
        assertNotEquals(half, ReduceOp.scaledSum(0.25));
        assertNotEquals(ReduceOp.SUM, ReduceOp.scaledSum(1));
        for (double bad : new double[] {Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY}) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> ReduceOp.scaledSum(bad));
            assertEquals("ReduceOp.scaledSum: factor " + bad + " is not finite: expected a finite number", e.getMessage());
        }
    }

    @Test
    void scalarsAreTheFactorInTheTypesEncoding() {
        Random random = new Random(42);
        for (int i = 0; i < 20_000; i++) {
            double factor = (random.nextDouble() * 2 - 1) * Math.scalb(1.0, random.nextInt(24) - 16);
            float f = (float) factor;
            assertEquals(Double.doubleToRawLongBits(factor), NcclTypes.scalarBits(DType.FP64, factor));
            assertEquals(Float.floatToRawIntBits(f) & 0xFFFF_FFFFL, NcclTypes.scalarBits(DType.FP32, factor));
            assertEquals(LowPrecision.floatToHalf(f) & 0xFFFFL, NcclTypes.scalarBits(DType.FP16, factor), "" + factor);
            assertEquals(LowPrecision.floatToBf16(f) & 0xFFFFL, NcclTypes.scalarBits(DType.BF16, factor), "" + factor);
            if (Math.abs(factor) <= 448) {
                assertEquals(LowPrecision.floatToE4m3(f) & 0xFFL, NcclTypes.scalarBits(DType.FP8_E4M3, factor),
                        "" + factor);
            }
            assertEquals(LowPrecision.floatToE5m2(f) & 0xFFL, NcclTypes.scalarBits(DType.FP8_E5M2, factor), "" + factor);
        }
        assertEquals(0xFDL, NcclTypes.scalarBits(DType.INT8, -3) & 0xFF); // the low byte is what NCCL reads
        assertEquals(0xFFFF_FFFDL, NcclTypes.scalarBits(DType.INT32, -3) & 0xFFFF_FFFFL);
        assertEquals(Long.MIN_VALUE, NcclTypes.scalarBits(DType.UINT64, 0x1p63));
    }

    @Test
    void factorsOutsideTheTypeAreNamed() {
        assertNull(NcclTypes.scalarProblem(DType.FP16, 65504));
        assertTrue(NcclTypes.scalarProblem(DType.FP16, 65505).contains("exceeds the largest finite FP16"));
        assertTrue(NcclTypes.scalarProblem(DType.FP8_E4M3, -449).contains("FP8_E4M3, 448.0"));
        assertNull(NcclTypes.scalarProblem(DType.FP32, 1e38));
        assertTrue(NcclTypes.scalarProblem(DType.FP32, 1e39).contains("FP32"));
        assertNull(NcclTypes.scalarProblem(DType.INT8, -128));
        assertEquals("INT8 tensors take a whole factor in [-128, 127]", NcclTypes.scalarProblem(DType.INT8, 128));
        assertEquals("UINT32 tensors take a whole factor in [0, 4294967295]", NcclTypes.scalarProblem(DType.UINT32, -1));
        assertEquals("INT64 tensors take a whole factor in [-9223372036854775808, 9223372036854774784]",
                NcclTypes.scalarProblem(DType.INT64, 0x1p63));
        assertEquals("UINT64 tensors take a whole factor in [0, 2^64)", NcclTypes.scalarProblem(DType.UINT64, 0x1p64));
        assertTrue(NcclTypes.scalarProblem(DType.INT32, 1.5).startsWith("INT32 tensors take a whole factor"));
    }
}
