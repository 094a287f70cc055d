package dev.jnccl.consumer;

import dev.jnccl.Communicator;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.spark.SparkOptions;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.SplittableRandom;

/**
 * Four ranks in threads mode run one transaction as training code does: reduce-scatter the
 * gradients, all-gather the weight shards, both on random data; every rank then checks every
 * element against a reference computed on the host. Prints OK, or exits with an exception.
 */
public final class ConsumerCheck {
    private static final int WORLD = 4;
    private static final int SHARD = 1024;
    private static final int COUNT = SHARD * WORLD;

    private ConsumerCheck() {}

    /**
     * Runs the check.
     *
     * @param args unused
     */
    public static void main(String[] args) {
        long seed = System.nanoTime();
        ThreadsCommunicators.run(WORLD, ThreadsOptions.defaults(), comm -> check(comm, seed));
        sparkOptions();
        System.out.println("jnccl consumer check: " + WORLD + " ranks, reduce-scatter + all-gather of " + COUNT
                + " FP32 elements on backend " + System.getProperty("jnccl.backend") + " (seed " + seed + "): OK");
    }

    /**
     * jnccl-spark resolves through the BOM and its API loads without Spark on the module path (the
     * cluster provides Spark): the options a driver ships to the barrier tasks, applied as a task would.
     */
    private static void sparkOptions() {
        Duration watchdog = Duration.ofSeconds(30 + new SplittableRandom().nextInt(60));
        SparkOptions options = SparkOptions.defaults().withDevice(1).withCommunicator(o -> o.withWatchdog(watchdog));
        if (options.device() != 1 || !options.communicator().watchdogTimeout().equals(watchdog)
                || SparkOptions.defaults().device() != -1) {
            throw new AssertionError("jnccl-spark: SparkOptions " + options + " lost its device or watchdog "
                    + watchdog + ": " + options.communicator());
        }
        System.out.println("jnccl consumer check: jnccl-spark's SparkOptions (device " + options.device()
                + ", watchdog " + watchdog + "): OK");
    }

    private static void check(Communicator comm, long seed) {
        int rank = comm.rank();
        try (CudaStream compute = CudaStream.create();
             DeviceMemory grads = DeviceMemory.allocate(DType.FP32, COUNT);
             DeviceMemory weights = DeviceMemory.allocate(DType.FP32, COUNT);
             CudaEvent ready = CudaEvent.create();
             CudaEvent done = CudaEvent.create()) {
            grads.copyFromHost(MemorySegment.ofArray(random(seed, rank, "grads", COUNT)));
            weights.copyFromHost(MemorySegment.ofArray(random(seed, rank, "weights", SHARD)),
                    (long) rank * SHARD * Float.BYTES);
            DeviceTensor g = grads.tensor(DType.FP32);
            DeviceTensor w = weights.tensor(DType.FP32);
            compute.record(ready);
            try (Transaction tx = comm.begin(ready)) {
                tx.reduceScatter(g);
                tx.allGather(w.shard(rank, WORLD), w);
                tx.execute(done);
            }
            comm.await(done);

            float[] reduced = new float[SHARD];
            grads.copyToHost(MemorySegment.ofArray(reduced), (long) rank * SHARD * Float.BYTES);
            float[] expected = new float[SHARD];
            for (int r = 0; r < WORLD; r++) {
                float[] contribution = random(seed, r, "grads", COUNT);
                for (int i = 0; i < SHARD; i++) {
                    expected[i] += contribution[rank * SHARD + i];
                }
            }
            for (int i = 0; i < SHARD; i++) {
                if (Math.abs(reduced[i] - expected[i]) > 1e-5f * Math.max(1f, Math.abs(expected[i]))) {
                    throw new AssertionError("rank " + rank + ": reduce-scatter element " + i + " is " + reduced[i]
                            + ", expected " + expected[i] + " (seed " + seed + ")");
                }
            }
            float[] gathered = new float[COUNT];
            weights.copyToHost(MemorySegment.ofArray(gathered));
            for (int r = 0; r < WORLD; r++) {
                float[] shard = random(seed, r, "weights", SHARD);
                for (int i = 0; i < SHARD; i++) {
                    if (Float.compare(gathered[r * SHARD + i], shard[i]) != 0) {
                        throw new AssertionError("rank " + rank + ": all-gather element " + i + " of rank " + r
                                + "'s shard is " + gathered[r * SHARD + i] + ", expected " + shard[i] + " (seed " + seed
                                + ")");
                    }
                }
            }
        }
    }

    /** Deterministic random values in [-1, 1) for a rank and a purpose, never all zeros. */
    private static float[] random(long seed, int rank, String what, int count) {
        SplittableRandom random = new SplittableRandom(seed ^ (31L * rank + what.hashCode()) * 0x9E3779B97F4A7C15L);
        float[] values = new float[count];
        for (int i = 0; i < count; i++) {
            values[i] = (float) (random.nextDouble() * 2 - 1);
        }
        return values;
    }
}
