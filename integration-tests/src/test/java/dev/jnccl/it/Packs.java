package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.Backend;
import dev.jnccl.Communicator;
import dev.jnccl.JncclRuntime;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Phaser;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;
import java.util.function.Supplier;

/** Running packs in tests: the memcpy modes, a bounded run, seeds, and the thread-leak check. */
final class Packs {
    /** A run's base seed: {@code -Djnccl.it.seed=...} reproduces a failure (every message prints it). */
    private static final Long FIXED_SEED = Long.getLong("jnccl.it.seed");

    private Packs() {}

    /** The two transport switches of threads mode. */
    record Mode(boolean memcpyAllGather, boolean memcpySendRecv) {
        static List<Mode> all() {
            return List.of(new Mode(false, false), new Mode(true, false), new Mode(false, true), new Mode(true, true));
        }

        ThreadsOptions options() {
            return ThreadsOptions.defaults().withMemcpyAllGather(memcpyAllGather).withMemcpySendRecv(memcpySendRecv);
        }

        @Override
        public String toString() {
            return "allGather " + (memcpyAllGather ? "memcpy" : "nccl") + ", send/recv " + (memcpySendRecv ? "memcpy" : "nccl");
        }
    }

    static long newSeed() {
        return FIXED_SEED != null ? FIXED_SEED : System.nanoTime() ^ 0x5DEECE66DL;
    }

    static Backend backend() {
        return JncclRuntime.query().backend();
    }

    static boolean onHost() {
        return backend() == Backend.HOST;
    }

    /**
     * {@code -Djnccl.it.shareDevices=true} runs worlds larger than the visible device count with
     * several ranks per device (rank r on device r mod devices): real multi-rank NCCL on one GPU
     * needs NCCL 2.30+ and NCCL_MULTI_RANK_GPU_ENABLE=1 (scripts/gpu/gpu-test.sh --threads-multi-rank).
     */
    static final boolean SHARE_DEVICES = Boolean.getBoolean("jnccl.it.shareDevices");

    /**
     * {@code options} placed for a {@code world}-rank pack: unchanged when there are enough devices;
     * else, with {@link #SHARE_DEVICES}, several ranks per device; else the test is skipped (visibly),
     * e.g. world 8 on a one-GPU machine.
     */
    static ThreadsOptions placed(int world, ThreadsOptions options) {
        int devices = Cuda.deviceCount();
        if (world <= devices) {
            return options;
        }
        assumeTrue(SHARE_DEVICES, "world " + world + " needs " + world + " devices; backend " + backend() + " has "
                + devices + " (-Djnccl.it.shareDevices=true puts several ranks on one device)");
        int[] deviceOfRank = new int[world];
        for (int rank = 0; rank < world; rank++) {
            deviceOfRank[rank] = rank % devices;
        }
        return options.withDevices(deviceOfRank);
    }

    /** Skips (visibly) a world larger than the visible devices, for a test that needs a device per rank. */
    static void assumeDevices(int world) {
        int devices = Cuda.deviceCount();
        assumeTrue(world <= devices, "world " + world + " needs " + world + " devices; backend " + backend()
                + " has " + devices);
    }

    static void assumeHost(String why) {
        assumeTrue(onHost(), "needs the host emulation (" + why + "); backend is " + backend());
    }

    /**
     * Runs {@code work} on every rank of a {@code world}-rank pack (each rank with its own
     * {@link RankContext}), bounded by {@code timeout}; then checks that no pack thread survived.
     */
    static void run(int world, ThreadsOptions options, Duration timeout, Consumer<RankContext> work) {
        ThreadsOptions placed = placed(world, options);
        long seed = newSeed();
        Phaser finished = new Phaser(world);
        assertTimeoutPreemptively(timeout, () -> ThreadsCommunicators.run(world, placed, comm -> {
            try (RankContext context = new RankContext(comm, seed)) {
                try {
                    work.accept(context);
                } catch (RuntimeException | Error e) {
                    finished.arriveAndDeregister(); // no peer waits for a rank that failed
                    throw e;
                }
                if (SHARE_DEVICES) {
                    awaitPeers(finished);
                }
            }
        }), () -> "pack of " + world + " ranks (" + placed + ", seed " + seed + ") did not finish within " + timeout
                + "; where its threads were:\n  " + String.join("\n  ", fullStacks()));
        assertNoPackThreads();
    }

    /**
     * With ranks sharing a device they share its CUDA context, and cudaFree (closing a RankContext)
     * waits for the whole device: a rank that frees its buffers while its peers are still in their last
     * transaction can stall them all (seen on the H200 at world 3: one rank in cudaFree, two in
     * ncclGroupEnd, for a minute). So a rank that ended normally waits a bounded time for the others
     * before freeing; a rank that failed frees at once and is not waited for.
     */
    private static void awaitPeers(Phaser finished) {
        try {
            finished.awaitAdvanceInterruptibly(finished.arrive(), 20, TimeUnit.SECONDS);
        } catch (TimeoutException e) {
            // a peer failed or is slow: its own failure is what the test reports
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * One rank of a {@code @MultiRankTest}: {@code work} with this rank's {@link RankContext} and the
     * test class's {@code seed}. A rank that ended normally then meets the others at a barrier before
     * its context frees its memory: ranks that share a device would stall each other otherwise (see
     * {@link #awaitPeers}); a rank that failed frees at once.
     */
    static void asRank(Communicator comm, long seed, Consumer<RankContext> work) {
        try (RankContext context = new RankContext(comm, seed)) {
            work.accept(context);
            comm.barrier();
        }
    }

    /** Both transports of threads mode by memcpy, as {@code @MultiRankTest} options. */
    static final class MemcpyTransports implements Supplier<ThreadsOptions> {
        @Override
        public ThreadsOptions get() {
            return new Mode(true, true).options();
        }
    }

    static void run(int world, ThreadsOptions options, Consumer<RankContext> work) {
        run(world, options, Duration.ofSeconds(60), work);
    }

    /** Names of live threads of packs (ranks and watchdogs). */
    static List<String> packThreads() {
        List<String> alive = new ArrayList<>();
        for (Map.Entry<Thread, StackTraceElement[]> entry : Thread.getAllStackTraces().entrySet()) {
            Thread thread = entry.getKey();
            String name = thread.getName();
            if (thread.isAlive() && (name.startsWith("jnccl-rank-") || name.startsWith("jnccl-watchdog-"))) {
                StringBuilder where = new StringBuilder(name).append(" (").append(thread.getState()).append(")");
                StackTraceElement[] stack = entry.getValue();
                int shown = 0;
                for (int i = 0; i < stack.length && shown < 12; i++) {
                    // the top frame, then jnccl's own frames (skip JDK and FFM plumbing)
                    if (i == 0 || stack[i].getClassName().startsWith("dev.jnccl")) {
                        where.append("\n      at ").append(stack[i]);
                        shown++;
                    }
                }
                alive.add(where.toString());
            }
        }
        return alive;
    }

    /** Every frame of every live jnccl thread (for a pack that did not finish: where it hangs). */
    static List<String> fullStacks() {
        List<String> stacks = new ArrayList<>();
        for (Map.Entry<Thread, StackTraceElement[]> entry : Thread.getAllStackTraces().entrySet()) {
            Thread thread = entry.getKey();
            if (thread.isAlive() && thread.getName().startsWith("jnccl-")) {
                StringBuilder where = new StringBuilder(thread.getName()).append(" (").append(thread.getState()).append(")");
                for (StackTraceElement frame : entry.getValue()) {
                    where.append("\n      at ").append(frame);
                }
                stacks.add(where.toString());
            }
        }
        return stacks;
    }

    /** Fails when a thread named jnccl-rank-* or jnccl-watchdog-* is still alive. */
    static void assertNoPackThreads() {
        List<String> alive = packThreads();
        assertTrue(alive.isEmpty(), () -> "pack threads survived: " + String.join("\n  ", alive));
    }
}
