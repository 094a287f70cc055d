package dev.jnccl.spark;

import dev.jnccl.Communicator;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.Set;
import org.apache.spark.BarrierTaskContext;

/**
 * The host-side cost in Spark barrier mode, per call: the communicator's {@link Communicator#barrier()}
 * and a 64-byte {@link Communicator#allGatherBytesHost} (both over NCCL itself), beside Spark's own
 * {@link BarrierTaskContext#barrier()} (a few calls: Spark polls its coordinator about once a second).
 * One barrier stage of {@code --tasks} tasks in local mode ({@code local[tasks]}, this JVM); each task
 * times its calls after a warm-up, and the report gives, per operation, the median and mean over the
 * calls of the slowest task. A measurement, not a test: {@code scripts/spark-host-cost.sh
 * [--tasks N] [--calls N] [--warmup N] [--spark-barriers N]}; docs/performance.md has its figures.
 */
public final class SparkHostCost {
    private static final String USAGE = "usage: SparkHostCost [--tasks N] [--calls N] [--warmup N] [--spark-barriers N]";

    private SparkHostCost() {}

    /**
     * Runs the measurement and exits: 0 when it ran (and every gathered byte matched), 2 for a bad
     * command line, 3 when it failed.
     *
     * @param args {@code --tasks N} (default 2), {@code --calls N} (default 2000), {@code --warmup N}
     *             (default 2000), {@code --spark-barriers N} (default 5)
     */
    public static void main(String[] args) {
        System.exit(run(args));
    }

    static int run(String[] args) {
        return LocalSpark.program("SparkHostCost", USAGE, args,
                Set.of("--tasks", "--calls", "--warmup", "--spark-barriers"), options -> {
                    int tasks = (int) LocalSpark.number(options, "--tasks", 2, 1, 64);
                    int calls = (int) LocalSpark.number(options, "--calls", 2000, 1, 10_000_000);
                    int warmup = (int) LocalSpark.number(options, "--warmup", 2000, 0, 10_000_000);
                    int sparkBarriers = (int) LocalSpark.number(options, "--spark-barriers", 5, 0, 1000);
                    String[] version = new String[1];
                    List<Object[]> results = LocalSpark.stage(tasks, "jnccl-spark-host-cost", spark -> {
                        version[0] = spark.version();
                        return SparkCommunicators.run(spark, tasks, SparkOptions.defaults(), comm ->
                                new Object[] {measure(comm, calls, warmup, sparkBarriers), comm.backend()});
                    });
                    if (results == null) {
                        return LocalSpark.EXIT_ERROR;
                    }
                    System.out.printf("Spark %s barrier mode, local[%d], backend %s, %d call(s) after %d warm-up,"
                            + " %d core(s), Java %s%n", version[0], tasks,
                            results.get(0)[1], calls, warmup, Runtime.getRuntime().availableProcessors(),
                            Runtime.version());
                    report(results.stream().map(r -> (long[][]) r[0]).toList());
                    return 0;
                });
    }

    /** Per operation: the median and mean per call of the slowest task. */
    private static void report(List<long[][]> perTask) {
        String[] names = {"Communicator.barrier()", "Communicator.allGatherBytesHost(64 B)",
            "BarrierTaskContext.barrier() (Spark)"};
        for (int op = 0; op < names.length; op++) {
            double worstMedian = 0;
            double worstMean = 0;
            for (long[][] task : perTask) {
                long[] nanos = task[op].clone();
                if (nanos.length == 0) {
                    continue;
                }
                Arrays.sort(nanos);
                worstMedian = Math.max(worstMedian, nanos[nanos.length / 2] / 1e3);
                worstMean = Math.max(worstMean, Arrays.stream(nanos).average().orElse(0) / 1e3);
            }
            System.out.printf("%-40s median %10.1f us, mean %10.1f us per call (slowest task, %d call(s))%n",
                    names[op], worstMedian, worstMean, perTask.get(0)[op].length);
        }
    }

    /** One task's times per call (ns): barrier, 64-byte host all-gather, Spark's barrier. */
    private static long[][] measure(Communicator comm, int calls, int warmup, int sparkBarriers) {
        int world = comm.worldSize();
        byte[] mine = new byte[64];
        new Random(comm.rank() * 7919L + 17).nextBytes(mine);
        byte[][] expected = new byte[world][64];
        for (int r = 0; r < world; r++) {
            new Random(r * 7919L + 17).nextBytes(expected[r]);
        }
        for (int i = 0; i < warmup; i++) {
            comm.barrier();
            check(comm.allGatherBytesHost(mine), expected);
        }
        long[] barrier = new long[calls];
        long[] gather = new long[calls];
        for (int i = 0; i < calls; i++) {
            long t0 = System.nanoTime();
            comm.barrier();
            long t1 = System.nanoTime();
            List<byte[]> all = comm.allGatherBytesHost(mine);
            long t2 = System.nanoTime();
            barrier[i] = t1 - t0;
            gather[i] = t2 - t1;
            check(all, expected);
        }
        BarrierTaskContext context = BarrierTaskContext.get();
        long[] spark = new long[sparkBarriers];
        for (int i = 0; i < sparkBarriers; i++) {
            long t0 = System.nanoTime();
            context.barrier();
            spark[i] = System.nanoTime() - t0;
        }
        return new long[][] {barrier, gather, spark};
    }

    private static void check(List<byte[]> all, byte[][] expected) {
        for (int r = 0; r < expected.length; r++) {
            if (!Arrays.equals(expected[r], all.get(r))) {
                throw new IllegalStateException("allGatherBytesHost: rank " + r + "'s bytes differ: "
                        + Arrays.toString(all.get(r)));
            }
        }
    }
}
