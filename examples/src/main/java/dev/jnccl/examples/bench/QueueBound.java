package dev.jnccl.examples.bench;

import java.util.Locale;
import org.openjdk.jmh.infra.BenchmarkParams;
import org.openjdk.jmh.infra.IterationParams;
import org.openjdk.jmh.runner.IterationType;

/**
 * The queue bound every benchmark variant applies in the same way: after every
 * {@link #SYNC_EVERY}th operation it synchronizes the comms stream (inside the measured method),
 * so the device's queue stays short. It also keeps the time spent in those synchronizations, so
 * that each measurement iteration can report the host-only ("enqueue") cost next to JMH's figure:
 * when the two differ much, the device (or the emulation's stream threads) set the pace, not the host.
 */
final class QueueBound {
    /** Synchronize after every this many operations (a power of two; the C program uses the same). */
    static final int SYNC_EVERY = 256;

    private final Runnable synchronize;
    private long operations;
    private long syncNanos;
    private long iterationStart;
    private long iterationOperations;

    QueueBound(Runnable synchronize) {
        this.synchronize = synchronize;
    }

    /** Counts one operation; synchronizes after every {@link #SYNC_EVERY}th. */
    void tick() {
        if ((++operations & (SYNC_EVERY - 1)) == 0) {
            long start = System.nanoTime();
            synchronize.run();
            syncNanos += System.nanoTime() - start;
        }
    }

    void startIteration() {
        syncNanos = 0;
        iterationOperations = operations;
        iterationStart = System.nanoTime();
    }

    /**
     * Prints one line for the benchmark's output, parsed by scripts/gpu/gpu-bench.sh:
     * {@code # host-only <benchmark>[<comm>] <warmup|measurement>: 1.234 us/op without the synchronizations (...)},
     * or {@code <benchmark>[k=<transactions>]} for the graph step benchmarks (one op = one step); a run
     * without the watchdog ({@code -p watchdog=off}) adds {@code [watchdog=off]}.
     */
    void endIteration(BenchmarkParams benchmark, IterationParams iteration) {
        long elapsed = System.nanoTime() - iterationStart;
        long ops = operations - iterationOperations;
        String name = benchmark.getBenchmark().substring(benchmark.getBenchmark().lastIndexOf('.') + 1);
        String comm = benchmark.getParam("comm");
        String steps = benchmark.getParam("transactions");
        String label = name + (comm == null ? "" : "[" + comm + "]") + (steps == null ? "" : "[k=" + steps + "]")
                + ("off".equals(benchmark.getParam("watchdog")) ? "[watchdog=off]" : "") + " "
                + (iteration.getType() == IterationType.WARMUP ? "warmup" : "measurement");
        if (ops == 0) {
            System.out.println("# host-only " + label + ": no operations");
            return;
        }
        System.out.println(String.format(Locale.ROOT, "# host-only %s: %.3f us/op without the synchronizations"
                        + " (%.1f%% of the time synchronizing, %d ops)", label, (elapsed - syncNanos) / 1e3 / ops,
                100.0 * syncNanos / elapsed, ops));
    }
}
