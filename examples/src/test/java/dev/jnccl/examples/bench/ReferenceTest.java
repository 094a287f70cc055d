package dev.jnccl.examples.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.ReduceOp;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import org.junit.jupiter.api.Test;

/**
 * The check's own pieces, on the host: test values survive encoding in every type, sums of them
 * stay exact, and the reference rejects a result that is one code off.
 */
class ReferenceTest {

    @Test
    void testValuesAreExactInEveryTypeAndVaried() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment segment = arena.allocate(8 * 64);
            for (BenchType type : BenchType.values()) {
                for (ReduceOp op : ReduceOp.values()) {
                    for (int ranks = 1; ranks <= 8; ranks++) {
                        java.util.Set<Long> distinct = new java.util.HashSet<>();
                        for (int i = 0; i < 64; i++) {
                            long v = type.reductionValue(42, ranks - 1, i, op, ranks);
                            distinct.add(v);
                            type.putValue(segment, i, v);
                            double back = type.isInteger() ? type.getInteger(segment, i) : type.getFloating(segment, i);
                            assertEquals(v, back, type + " " + op + " ranks " + ranks + " value " + v);
                        }
                        assertTrue(distinct.size() > 1, type + " " + op + ": constant test data " + distinct);
                    }
                }
            }
        }
    }

    @Test
    void referenceAcceptsTheReductionAndRejectsOneCodeOff() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment result = arena.allocate(8);
            int ranks = 3;
            for (BenchType type : BenchType.values()) {
                for (ReduceOp op : new ReduceOp[] {ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN}) {
                    for (long index = 0; index < 50; index++) {
                        long acc = type.reductionValue(7, 0, index, op, ranks);
                        for (int q = 1; q < ranks; q++) {
                            long v = type.reductionValue(7, q, index, op, ranks);
                            acc = switch (op.kind()) {
                                case PROD -> acc * v;
                                case MAX -> Math.max(acc, v);
                                case MIN -> Math.min(acc, v);
                                default -> acc + v;
                            };
                        }
                        String what = type + " " + op + " index " + index + " expected " + acc;
                        type.putValue(result, 0, acc);
                        assertTrue(Reference.reductionMatches(type, op, 7, ranks, index, result, 0), what);
                        type.putBits(result, 0, type.getBits(result, 0) ^ 1); // the neighbouring code
                        assertFalse(Reference.reductionMatches(type, op, 7, ranks, index, result, 0), what);
                    }
                }
            }
        }
    }
}
