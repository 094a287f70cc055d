package dev.jnccl.examples.bench;

import static java.lang.foreign.ValueLayout.JAVA_FLOAT;

import dev.jnccl.Communicator;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.Locale;
import java.util.SplittableRandom;

/**
 * One rank of {@link PairedHostCost}: its tensors and events, the twin on the same communicator,
 * the check, and per case the warm-up and the paired blocks.
 */
final class PairedRank {
    private final Communicator comm;
    private final PairedHostCost.Settings settings;
    private final CudaStream compute;
    private final CudaEvent ready;
    private final CudaEvent signal;
    private final DeviceMemory memory;
    private final DeviceTensor tensor;
    private final DeviceTensor shard;
    private final DeviceTensor other;
    private final DeviceTensor one;
    private final RawTwin raw;
    /** What the last {@link #timeBlock} measured: all of it, and the synchronizations in it. */
    private long blockNanos;
    private long blockSyncNanos;

    private PairedRank(Communicator comm, PairedHostCost.Settings settings, CudaStream compute, CudaEvent[] events,
                       DeviceMemory memory, DeviceMemory received, Arena arena) {
        this.comm = comm;
        this.settings = settings;
        this.compute = compute;
        this.ready = events[0];
        this.signal = events[1];
        this.memory = memory;
        this.tensor = memory.tensor(DType.FP32);
        this.shard = tensor.shard(comm.rank(), comm.worldSize());
        this.other = received.tensor(DType.FP32);
        this.one = tensor.slice(0, 1);
        this.raw = new RawTwin(comm, compute, events[2], events[3], events[4], events[5], memory.address(),
                received.address(), settings.count(), arena);
    }

    /** Everything one rank does: set up, check, every case; prints its lines. */
    static void run(Communicator comm, PairedHostCost.Settings settings) {
        int count = settings.count();
        try (Arena arena = Arena.ofConfined(); CudaStream compute = CudaStream.create();
             CudaEvent e0 = CudaEvent.create(); CudaEvent e1 = CudaEvent.create(); CudaEvent e2 = CudaEvent.create();
             CudaEvent e3 = CudaEvent.create(); CudaEvent e4 = CudaEvent.create(); CudaEvent e5 = CudaEvent.create();
             DeviceMemory memory = DeviceMemory.allocate(DType.FP32, count);
             DeviceMemory received = DeviceMemory.allocate(DType.FP32, count)) {
            received.fill((byte) 0, compute);
            PairedRank rank = new PairedRank(comm, settings, compute, new CudaEvent[] {e0, e1, e2, e3, e4, e5}, memory,
                    received, arena);
            rank.check(arena);
            compute.record(e0); // the transaction's ready event
            compute.synchronize();
            for (String name : settings.cases()) {
                rank.measure(name);
            }
            compute.synchronize();
            comm.synchronize();
        }
    }

    /** The two sides of a case: jnccl's call and the twin's, or null when the twin has no one-call equivalent. */
    private Runnable[] sides(String name) {
        return switch (name) {
            case "transaction" -> new Runnable[] {
                () -> comm.begin(ready).reduceScatter(tensor).allGather(shard, tensor).execute(signal), raw::transaction};
            case "all_reduce" -> new Runnable[] {
                () -> comm.allReduce(tensor, ReduceOp.SUM, compute), () -> raw.allReduce(Nccl.ncclSum())};
            case "reduce_scatter" -> new Runnable[] {() -> comm.reduceScatter(tensor, compute), raw::reduceScatter};
            case "all_gather" -> new Runnable[] {() -> comm.allGather(shard, tensor, compute), raw::allGather};
            case "broadcast" -> new Runnable[] {() -> comm.broadcast(tensor, 0, compute), raw::broadcast};
            case "all_to_all" -> raw.hasAllToAll()
                    ? new Runnable[] {() -> comm.allToAll(tensor, other, compute), raw::allToAll} : null;
            case "reduce_mean" -> new Runnable[] {
                () -> comm.reduceMean(tensor, compute), raw::reduceMean};
            case "reduce_max" -> new Runnable[] {
                () -> comm.reduceMax(tensor, compute), () -> raw.allReduce(Nccl.ncclMax())};
            case "reduce_norm_squared" -> new Runnable[] {() -> comm.reduceNormSquared(one, compute), raw::allReduceOne};
            default -> throw new IllegalArgumentException("unknown case " + name);
        };
    }

    /**
     * Once, before the cases: an all-reduce (sum) of the twin, then one of jnccl, each on random data
     * of every rank (seeded by rank, so each rank knows the others'), compared element by element
     * with the sum; prints a CHECK line per side and fails on a mismatch.
     */
    private void check(Arena arena) {
        int count = settings.count();
        MemorySegment host = arena.allocate((long) count * Float.BYTES);
        float[] expected = new float[count];
        for (int r = 0; r < comm.worldSize(); r++) {
            float[] data = data(r, count);
            for (int i = 0; i < count; i++) {
                expected[i] += data[i];
            }
        }
        checkSide("raw", () -> raw.allReduce(Nccl.ncclSum()), host, expected);
        checkSide("jnccl", () -> comm.allReduce(tensor, ReduceOp.SUM, compute), host, expected);
    }

    private void checkSide(String side, Runnable allReduce, MemorySegment host, float[] expected) {
        MemorySegment.copy(data(comm.rank(), expected.length), 0, host, JAVA_FLOAT, 0, expected.length);
        memory.copyFromHost(host);
        comm.barrier();
        allReduce.run();
        raw.synchronize();
        memory.copyToHost(host);
        int mismatches = 0;
        String first = "";
        for (int i = 0; i < expected.length; i++) {
            float got = host.getAtIndex(JAVA_FLOAT, i);
            if (Math.abs(got - expected[i]) > 1e-5f * comm.worldSize()) {
                first = mismatches++ == 0 ? " first=[" + i + "]:" + got + "!=" + expected[i] : first;
            }
        }
        System.out.printf(Locale.ROOT, "CHECK impl=%s case=all_reduce world=%d rank=%d elements=%d mismatches=%d%s%n",
                side, comm.worldSize(), comm.rank(), expected.length, mismatches, first);
        if (mismatches != 0) {
            throw new IllegalStateException("PairedHostCost: the " + side + " all-reduce of rank " + comm.rank()
                    + " is wrong in " + mismatches + " of " + expected.length + " elements:" + first);
        }
    }

    /** Rank {@code rank}'s random data, in [-1, 1) and never all zeros. */
    private static float[] data(int rank, int count) {
        SplittableRandom random = new SplittableRandom(1_000 + rank);
        float[] data = new float[count];
        for (int i = 0; i < count; i++) {
            data[i] = (float) (random.nextDouble() * 2 - 1);
        }
        return data;
    }

    /** One case: warm-up, then the paired blocks; prints its PAIRED line. */
    private void measure(String name) {
        Runnable[] sides = sides(name);
        if (sides == null) {
            System.out.println("# PairedHostCost: " + name + " skipped: this NCCL has no ncclAlltoAll (jnccl sends and"
                    + " receives; the twin would not make the same calls)");
            return;
        }
        warmUp(sides);
        int blocks = settings.blocks();
        double[] jnccl = new double[blocks];
        double[] twin = new double[blocks];
        double[] jncclHost = new double[blocks];
        double[] twinHost = new double[blocks];
        for (int b = 0; b < blocks; b++) {
            // The side that goes first alternates, so that neither always follows the other's synchronization.
            for (int k = 0; k < 2; k++) {
                boolean jncclNow = (b + k) % 2 == 0;
                comm.barrier();
                timeBlock(sides[jncclNow ? 0 : 1]);
                double perCall = blockNanos / 1e3 / settings.calls();
                double hostPerCall = (blockNanos - blockSyncNanos) / 1e3 / settings.calls();
                (jncclNow ? jnccl : twin)[b] = perCall;
                (jncclNow ? jncclHost : twinHost)[b] = hostPerCall;
            }
        }
        report(name, jnccl, twin, jncclHost, twinHost);
    }

    /**
     * Both sides alternately, {@link QueueBound#SYNC_EVERY} calls at a time, until each made
     * {@code --warmup-calls} and {@code --warmup-ms} have passed on every rank (the ranks agree
     * after every round, so that they stop together: their collectives pair).
     */
    private void warmUp(Runnable[] sides) {
        long start = System.nanoTime();
        long made = 0;
        boolean done = false;
        while (!done) {
            for (Runnable side : sides) {
                for (int i = 0; i < QueueBound.SYNC_EVERY; i++) {
                    side.run();
                }
                raw.synchronize();
            }
            made += QueueBound.SYNC_EVERY;
            boolean mine = made >= settings.warmupCalls() && System.nanoTime() - start >= settings.warmupMs() * 1_000_000;
            done = Arrays.stream(comm.allGatherLongsHost(mine ? 1 : 0)).allMatch(v -> v == 1);
        }
    }

    /** {@code --calls} calls of {@code op}, the queue bound inside; sets {@link #blockNanos} and {@link #blockSyncNanos}. */
    private void timeBlock(Runnable op) {
        int calls = settings.calls();
        long sync = 0;
        long start = System.nanoTime();
        for (int i = 1; i <= calls; i++) {
            op.run();
            if ((i & (QueueBound.SYNC_EVERY - 1)) == 0) {
                long before = System.nanoTime();
                raw.synchronize();
                sync += System.nanoTime() - before;
            }
        }
        long before = System.nanoTime();
        raw.synchronize();
        long end = System.nanoTime();
        blockNanos = end - start;
        blockSyncNanos = sync + end - before;
    }

    private void report(String name, double[] jnccl, double[] twin, double[] jncclHost, double[] twinHost) {
        double[] ratio = new double[jnccl.length];
        double[] hostRatio = new double[jnccl.length];
        for (int b = 0; b < jnccl.length; b++) {
            ratio[b] = jnccl[b] / twin[b];
            hostRatio[b] = jncclHost[b] / twinHost[b];
        }
        double[] r = sorted(ratio);
        double[] h = sorted(hostRatio);
        System.out.printf(Locale.ROOT, "PAIRED case=%s mode=%s world=%d rank=%d blocks=%d calls=%d ratio_median=%.4f"
                        + " ratio_q1=%.4f ratio_q3=%.4f ratio_min=%.4f ratio_max=%.4f host_ratio_median=%.4f"
                        + " host_ratio_min=%.4f host_ratio_max=%.4f jnccl_us=%.3f raw_us=%.3f jnccl_host_us=%.3f"
                        + " raw_host_us=%.3f%n", name, comm.options().mode(), comm.worldSize(), comm.rank(), jnccl.length,
                settings.calls(), quantile(r, 0.5), quantile(r, 0.25), quantile(r, 0.75), r[0], r[r.length - 1],
                quantile(h, 0.5), h[0], h[h.length - 1], quantile(sorted(jnccl), 0.5), quantile(sorted(twin), 0.5),
                quantile(sorted(jncclHost), 0.5), quantile(sorted(twinHost), 0.5));
    }

    private static double[] sorted(double[] values) {
        double[] copy = values.clone();
        Arrays.sort(copy);
        return copy;
    }

    /** The {@code q} quantile of sorted values, linear between neighbours. */
    static double quantile(double[] sorted, double q) {
        double at = q * (sorted.length - 1);
        int low = (int) Math.floor(at);
        int high = Math.min(low + 1, sorted.length - 1);
        return sorted[low] + (at - low) * (sorted[high] - sorted[low]);
    }
}
