package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.it.Packs.Mode;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A ZeRO-3-style training loop in threads mode: every rank owns a shard of each layer's weights;
 * per step and layer it all-gathers the layer's weights (the gather of a later layer is prefetched
 * in an earlier transaction), computes a stand-in gradient from the gathered weights, its rank and
 * the step, reduce-scatters it (in the same transaction as the next prefetch) and applies SGD to its
 * shard. Odd layers gather in place (the shard is the rank's slice of the full buffer), even layers
 * out of place. The final shards must equal a single-rank Java reference bit for bit: weights are
 * multiples of 1/2, gradients small integers, the learning rate 1/2, so every float operation is
 * exact in any order (on real NCCL too).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsZero3Test {
    private static final int WORLD = 4;
    private static final int STEPS = 20;
    /** Elements per layer (divisible by the world size). */
    private static final int[] LAYERS = {840 * 2, 840 * 3, 840};
    private static final float LR = 0.5f;

    static Stream<Mode> modes() {
        return Stream.of(new Mode(false, false), new Mode(true, true));
    }

    /** Initial weights of layer {@code l}: multiples of 1/2 in ±[0.5, 8], never zero. */
    private static float[] initialWeights(long seed, int layer) {
        java.util.SplittableRandom random = new java.util.SplittableRandom(Data.seed(seed, -1, "zero3.layer" + layer));
        float[] w = new float[LAYERS[layer]];
        for (int i = 0; i < w.length; i++) {
            float magnitude = (1 + random.nextInt(16)) * 0.5f;
            w[i] = random.nextBoolean() ? magnitude : -magnitude;
        }
        return w;
    }

    /** The stand-in gradient of element {@code i}: an integer in [-3, 4] from the weight, rank, step and layer. */
    private static float gradient(float weight, int rank, int step, int layer, int i) {
        long k = (long) Math.floor(weight * 2) * 31 + rank * 7L + step * 3L + layer * 11L + i;
        int g = (int) Math.floorMod(k, 7L) - 3;
        return g == 0 ? 4 : g;
    }

    /** The single-rank reference: the same loop on the full weights. */
    private static float[][] reference(long seed) {
        float[][] w = new float[LAYERS.length][];
        for (int l = 0; l < LAYERS.length; l++) {
            w[l] = initialWeights(seed, l);
        }
        for (int step = 0; step < STEPS; step++) {
            for (int l = 0; l < LAYERS.length; l++) {
                float[] gathered = w[l].clone();
                for (int i = 0; i < gathered.length; i++) {
                    float sum = 0;
                    for (int r = 0; r < WORLD; r++) {
                        sum += gradient(gathered[i], r, step, l, i);
                    }
                    w[l][i] -= LR * sum;
                }
            }
        }
        return w;
    }

    @ParameterizedTest(name = "world 4, {0}")
    @MethodSource("modes")
    void finalShardsEqualTheSingleRankReference(Mode mode) {
        Map<Integer, float[][]> shards = new ConcurrentHashMap<>();
        long[] seedSeen = new long[1];
        Packs.run(WORLD, mode.options(), c -> {
            seedSeen[0] = c.seed;
            shards.put(c.rank, train(c));
        });
        float[][] expected = reference(seedSeen[0]);
        assertEquals(WORLD, shards.size());
        for (int r = 0; r < WORLD; r++) {
            for (int l = 0; l < LAYERS.length; l++) {
                int shard = LAYERS[l] / WORLD;
                Verify.floats("ZeRO-3 final shard of layer " + l + ", rank " + r + " (" + mode + ", seed " + seedSeen[0] + ")",
                        Data.slice(expected[l], r * shard, shard), shards.get(r)[l]);
            }
        }
    }

    /** One rank's loop; returns its final shards. */
    private static float[][] train(RankContext c) {
        int n = c.world;
        int layers = LAYERS.length;
        float[][] shard = new float[layers][];
        DeviceTensor[] full = new DeviceTensor[layers];
        DeviceTensor[] shardTensor = new DeviceTensor[layers];
        DeviceTensor[] grad = new DeviceTensor[layers];
        // Signal of transaction 0 (gathers layers 0 and 1) and of the transaction after layer l (l + 1).
        CudaEvent[] signal = new CudaEvent[layers + 1];
        CudaEvent[] gatheredBy = new CudaEvent[layers];
        for (int t = 0; t <= layers; t++) {
            signal[t] = c.event();
        }
        for (int l = 0; l < layers; l++) {
            int count = LAYERS[l] / n;
            shard[l] = Data.slice(initialWeights(c.seed, l), c.rank * count, count);
            full[l] = c.alloc(DType.FP32, LAYERS[l]);
            grad[l] = c.alloc(DType.FP32, LAYERS[l]);
            if (l % 2 == 1) {
                shardTensor[l] = full[l].shard(c.rank, n); // in place
            } else {
                shardTensor[l] = c.alloc(DType.FP32, count);
            }
            c.write(shardTensor[l], shard[l]);
        }
        for (int step = 0; step < STEPS; step++) {
            // Gather layer 0, prefetch layer 1.
            try (Transaction tx = c.comm.begin(c.compute())) {
                tx.allGather(shardTensor[0], full[0]);
                if (layers > 1) {
                    tx.allGather(shardTensor[1], full[1]);
                }
                tx.execute(signal[0]);
            }
            gatheredBy[0] = signal[0];
            if (layers > 1) {
                gatheredBy[1] = signal[0];
            }
            for (int l = 0; l < layers; l++) {
                c.comm.await(gatheredBy[l]);
                float[] weights = c.floats(full[l]);
                float[] g = new float[weights.length];
                for (int i = 0; i < g.length; i++) {
                    g[i] = gradient(weights[i], c.rank, step, l, i);
                }
                c.write(grad[l], g);
                // Reduce-scatter this layer's gradient; prefetch layer l + 2 in the same transaction.
                try (Transaction tx = c.comm.begin(c.compute())) {
                    tx.reduceScatter(grad[l]);
                    if (l + 2 < layers) {
                        tx.allGather(shardTensor[l + 2], full[l + 2]);
                    }
                    tx.execute(signal[l + 1]);
                }
                if (l + 2 < layers) {
                    gatheredBy[l + 2] = signal[l + 1];
                }
                c.comm.await(signal[l + 1]);
                float[] r = c.floats(grad[l].shard(c.rank, n));
                for (int i = 0; i < r.length; i++) {
                    shard[l][i] -= LR * r[i];
                }
                c.write(shardTensor[l], shard[l]);
            }
        }
        return shard;
    }
}
