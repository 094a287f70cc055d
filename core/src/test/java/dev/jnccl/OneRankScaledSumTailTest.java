package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.BitSet;
import org.junit.jupiter.api.Test;

/**
 * Which elements NCCL 2.28's single-rank scaled sum covers ({@link CommandRunner#oneRankPreMulSumCovers}):
 * the formula against a block-by-block model of that kernel, and against the lengths where the H200
 * showed the last element unscaled (FP64/INT64/UINT64 at 4099 and 65537, FP32/INT32 at 4097, FP16 never).
 */
class OneRankScaledSumTailTest {

    /** NCCL 2.28's oneRankReduce: block b of n takes [b * per, (b + 1) * per) clipped to count. */
    private static BitSet kernel(long count, int elementSize) {
        int perPack = 16 / elementSize;
        int blocks = (int) Math.min(32, (count * elementSize + (16 << 10) - 1) / (16 << 10));
        long per = ((count / blocks) + perPack - 1) / perPack * perPack;
        BitSet covered = new BitSet();
        for (int b = 0; b < blocks; b++) {
            covered.set((int) Math.min(b * per, count), (int) Math.min((b + 1) * per, count));
        }
        return covered;
    }

    @Test
    void theFormulaMatchesTheKernelsBlocksAndTheTailFitsOneCall() {
        for (int elementSize : new int[] {1, 2, 4, 8}) {
            for (long count = 1; count < 300_000; count += count < 5000 ? 1 : 997) {
                BitSet covered = kernel(count, elementSize);
                long formula = CommandRunner.oneRankPreMulSumCovers(count, elementSize);
                assertEquals(covered.nextClearBit(0), formula, "covered prefix, " + count + " x " + elementSize + " B");
                assertEquals(formula, covered.cardinality(), "no holes before the tail, " + count + " x " + elementSize);
                long tail = count - formula;
                assertTrue(tail < 32, "tail " + tail + " of " + count);
                if (tail > 0) {
                    assertEquals(tail, CommandRunner.oneRankPreMulSumCovers(tail, elementSize), "the tail's own call");
                }
            }
        }
    }

    @Test
    void theLengthsSeenFailingOnTheGpuLeaveATail() {
        assertEquals(4098, CommandRunner.oneRankPreMulSumCovers(4099, 8));
        assertEquals(65536, CommandRunner.oneRankPreMulSumCovers(65537, 8));
        assertEquals(4096, CommandRunner.oneRankPreMulSumCovers(4097, 4));
        assertEquals(4097, CommandRunner.oneRankPreMulSumCovers(4097, 2));
        assertEquals(4099, CommandRunner.oneRankPreMulSumCovers(4099, 2));
    }
}
