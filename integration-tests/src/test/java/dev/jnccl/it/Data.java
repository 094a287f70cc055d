package dev.jnccl.it;

import dev.jnccl.ReduceOp;
import dev.jnccl.testsupport.LowPrecision;
import java.util.List;
import java.util.SplittableRandom;

/**
 * Random test data from per-rank seeds, and the Java references the results are checked against.
 *
 * <p>Values are never zero (magnitudes in [0.5, 2)), so a missing or skipped operation cannot
 * pass by accident. References follow NCCL's arithmetic, which the host emulation reproduces:
 * contributions combined in ring order (see {@link Ring}), every step rounded in the type; AVG on
 * floating types is NCCL's pre-multiplied sum. On the host backend the results must match bit for
 * bit; on real NCCL (whose all-reduce may split its ring over several channels) {@link Verify}
 * applies a tolerance.
 */
final class Data {
    private Data() {}

    /** A seed for {@code rank}'s data named {@code tag} in a run with {@code base}. */
    static long seed(long base, int rank, String tag) {
        return mix(base ^ mix(0x9E3779B97F4A7C15L * (rank + 1) + tag.hashCode()));
    }

    private static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** Nonzero floats, magnitude in [0.5, 2), random sign. */
    static float[] fp32(long seed, int count) {
        SplittableRandom random = new SplittableRandom(seed);
        float[] values = new float[count];
        for (int i = 0; i < count; i++) {
            float magnitude = 0.5f + 1.5f * (float) random.nextDouble();
            values[i] = random.nextBoolean() ? magnitude : -magnitude;
        }
        return values;
    }

    /** Nonzero bf16 values (raw bits), magnitude in [0.5, 2), random sign. */
    static short[] bf16(long seed, int count) {
        float[] floats = fp32(seed, count);
        short[] values = new short[count];
        for (int i = 0; i < count; i++) {
            values[i] = (short) (Float.floatToRawIntBits(floats[i]) >>> 16); // truncation: still in range, nonzero
        }
        return values;
    }

    /** Nonzero random ints over the whole range. */
    static int[] int32(long seed, int count) {
        SplittableRandom random = new SplittableRandom(seed);
        int[] values = new int[count];
        for (int i = 0; i < count; i++) {
            int v;
            do {
                v = random.nextInt();
            } while (v == 0);
            values[i] = v;
        }
        return values;
    }

    /** Nonzero random bytes. */
    static byte[] bytes(long seed, int count) {
        SplittableRandom random = new SplittableRandom(seed);
        byte[] values = new byte[count];
        for (int i = 0; i < count; i++) {
            values[i] = (byte) (1 + random.nextInt(255));
        }
        return values;
    }

    // ------------------------------------------------------------------ references

    /**
     * Where NCCL's ring starts the reduction of an element: contributions are combined from rank
     * {@code first(i)} on, in ring order (see the emulation's reduce.c, checked against NCCL 2.30).
     */
    @FunctionalInterface
    interface Ring {
        int first(int index);

        /** A reduce-scatter's chunk for {@code rank} travels the ring from rank + 1 to rank. */
        static Ring reduceScatter(int rank, int world) {
            return index -> (rank + 1) % world;
        }

        /**
         * An all-reduce of {@code count} elements of {@code elementSize} bytes: ring chunk k
         * (ceil(count / n) elements rounded up to 16 bytes, NCCL's one-channel split) goes from
         * rank k + 1 to rank k.
         */
        static Ring allReduce(int count, int world, int elementSize) {
            int granule = Math.max(1, 16 / elementSize);
            int chunk = Math.max(1, ((count + world - 1) / world + granule - 1) / granule * granule);
            return index -> (index / chunk + 1) % world;
        }
    }

    /**
     * FP32 {@code op} over {@code inputs} (one array per rank) for elements [from, from + count), in
     * ring order, every step rounded to float; AVG: x * (1/n), then a fused multiply-add per step;
     * a scaled sum: the same with its factor (NCCL's pre-multiplied sum, which its AVG is).
     */
    static float[] reduce(List<float[]> inputs, ReduceOp op, int from, int count, Ring ring) {
        int n = inputs.size();
        boolean scaled = op.kind() == ReduceOp.Kind.SCALED_SUM;
        float scale = scaled ? (float) op.factor() : 1.0f / n;
        float[] out = new float[count];
        for (int i = 0; i < count; i++) {
            int first = ring.first(from + i);
            float acc = inputs.get(first)[from + i];
            if (op == ReduceOp.AVG || scaled) {
                acc = acc * scale;
            }
            for (int k = 1; k < n; k++) {
                float x = inputs.get((first + k) % n)[from + i];
                acc = switch (op.kind()) {
                    case SUM -> acc + x;
                    case AVG, SCALED_SUM -> Math.fma(x, scale, acc);
                    case PROD -> acc * x;
                    case MAX -> Math.max(acc, x);
                    case MIN -> Math.min(acc, x);
                };
            }
            out[i] = acc;
        }
        return out;
    }

    /**
     * BF16 {@code op}: as {@link #reduce(List, ReduceOp, int, int, Ring)} with every step rounded to
     * BF16 (NCCL reduces BF16 pairwise); AVG scales by 1/n rounded to BF16, a scaled sum by its
     * factor rounded to BF16 (through FP32).
     */
    static short[] reduceBf16(List<short[]> inputs, ReduceOp op, int from, int count, Ring ring) {
        int n = inputs.size();
        boolean scaled = op.kind() == ReduceOp.Kind.SCALED_SUM;
        float scale = roundBf16(scaled ? (float) op.factor() : 1.0f / n);
        short[] out = new short[count];
        for (int i = 0; i < count; i++) {
            int first = ring.first(from + i);
            float acc = LowPrecision.bf16ToFloat(inputs.get(first)[from + i]);
            if (op == ReduceOp.AVG || scaled) {
                acc = roundBf16(acc * scale);
            }
            for (int k = 1; k < n; k++) {
                float x = LowPrecision.bf16ToFloat(inputs.get((first + k) % n)[from + i]);
                acc = roundBf16(switch (op.kind()) {
                    case SUM -> acc + x;
                    case AVG, SCALED_SUM -> Math.fma(x, scale, acc);
                    case PROD -> acc * x;
                    case MAX -> Math.max(acc, x);
                    case MIN -> Math.min(acc, x);
                });
            }
            out[i] = LowPrecision.floatToBf16(acc);
        }
        return out;
    }

    private static float roundBf16(float value) {
        return LowPrecision.bf16ToFloat(LowPrecision.floatToBf16(value));
    }

    /**
     * INT32 {@code op} with wrap-around (AVG: wrapped sum divided by n, truncating; a scaled sum:
     * each input times the factor, then summed).
     */
    static int[] reduceInt(List<int[]> inputs, ReduceOp op, int from, int count) {
        int n = inputs.size();
        int[] out = new int[count];
        int factor = (int) op.factor();
        for (int i = 0; i < count; i++) {
            int acc = inputs.get(0)[from + i];
            if (op.kind() == ReduceOp.Kind.SCALED_SUM) {
                acc *= factor;
            }
            for (int j = 1; j < n; j++) {
                int x = inputs.get(j)[from + i];
                acc = switch (op.kind()) {
                    case SCALED_SUM -> acc + x * factor;
                    case SUM, AVG -> acc + x;
                    case PROD -> acc * x;
                    case MAX -> Math.max(acc, x);
                    case MIN -> Math.min(acc, x);
                };
            }
            out[i] = op == ReduceOp.AVG ? (int) ((long) acc / n) : acc;
        }
        return out;
    }

    /** Per element, the sum of the contributions' magnitudes: the scale of a sum's rounding error. */
    static double[] magnitude(List<float[]> inputs, int from, int count) {
        double[] out = new double[count];
        for (float[] input : inputs) {
            for (int i = 0; i < count; i++) {
                out[i] += Math.abs(input[from + i]);
            }
        }
        return out;
    }

    static double[] magnitudeBf16(List<short[]> inputs, int from, int count) {
        double[] out = new double[count];
        for (short[] input : inputs) {
            for (int i = 0; i < count; i++) {
                out[i] += Math.abs(LowPrecision.bf16ToFloat(input[from + i]));
            }
        }
        return out;
    }

    static float[] slice(float[] values, int from, int count) {
        return java.util.Arrays.copyOfRange(values, from, from + count);
    }

    static short[] slice(short[] values, int from, int count) {
        return java.util.Arrays.copyOfRange(values, from, from + count);
    }

    static int[] slice(int[] values, int from, int count) {
        return java.util.Arrays.copyOfRange(values, from, from + count);
    }
}
