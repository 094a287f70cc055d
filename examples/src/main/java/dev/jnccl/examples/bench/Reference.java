package dev.jnccl.examples.bench;

import dev.jnccl.ReduceOp;
import java.lang.foreign.MemorySegment;

/**
 * The Java reference of the reductions: recomputes what every rank contributed at an input index
 * ({@link BenchType#reductionValue}) and combines it. Integers wrap like NCCL's; sums, products,
 * maxima and minima of the test values are exact in every type, so those results must match exactly;
 * the floating-point average (NCCL pre-multiplies each contribution by 1/n) is compared within a
 * few roundings of the type.
 */
final class Reference {
    private Reference() {}

    static boolean reductionMatches(BenchType type, ReduceOp op, long seed, int ranks, long index, MemorySegment result,
                                    long element) {
        // Combined in long arithmetic for every type: integers wrap like NCCL's, and the floating types'
        // test values keep every partial result far inside long's range (and exact in the type).
        long acc = type.reductionValue(seed, 0, index, op, ranks);
        double magnitude = Math.abs((double) acc);
        for (int q = 1; q < ranks; q++) {
            long v = type.reductionValue(seed, q, index, op, ranks);
            magnitude += Math.abs((double) v);
            acc = switch (op.kind()) {
                case SUM, AVG -> acc + v;
                case PROD -> acc * v;
                case MAX -> Math.max(acc, v);
                case MIN -> Math.min(acc, v);
                case SCALED_SUM -> throw new IllegalArgumentException("the benchmark has no " + op);
            };
        }
        if (type.isInteger()) {
            long expected = op == ReduceOp.AVG ? acc / ranks : acc; // NCCL's integer avg: sum, then divide (truncating)
            return type.getInteger(result, element) == type.wrap(expected);
        }
        double got = type.getFloating(result, element);
        if (op != ReduceOp.AVG) {
            return got == acc;
        }
        double expected = (double) acc / ranks;
        // each pre-multiplied term and each partial sum rounds once in the type
        double tolerance = 2 * type.epsilon() * (ranks + 1) * magnitude / ranks;
        return Math.abs(got - expected) <= tolerance;
    }
}
