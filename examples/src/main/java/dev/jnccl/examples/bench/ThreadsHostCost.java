package dev.jnccl.examples.bench;

import dev.jnccl.CommunicatorMode;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import java.util.Arrays;

/**
 * Host cost of jnccl operations in threads mode with every rank on one device: the Java side of
 * {@code transaction_overhead.c --threads W}. For each {@link CommunicatorMode} chosen,
 * one threads-mode pack of W ranks, all on {@code --device} ({@link ThreadsOptions#withDevices(int...)}),
 * times the same cases as {@link MultiRankHostCost} on every rank thread, with a barrier
 * ({@code comm.barrier()}) before the warm-up and before every repetition, as the C program's threads.
 * One parseable line per rank and case ({@link RankHostCost}):
 * {@code RESULT impl=jnccl case=transaction mode=BLOCKING_SPLIT launch=threads world=2 rank=0 median_us=... min_us=...}.
 *
 * <p>Several ranks of one process on one GPU need NCCL 2.30 or newer with
 * {@code NCCL_MULTI_RANK_GPU_ENABLE=1} ({@code -Djnccl.nccl.library=/path/libnccl.so.2}); the host
 * emulation follows the same variable. The threads are pinned to the device's CPUs as jnccl's
 * default does ({@code --pin-cpus false}: not pinned, as the C program's threads). Each transaction
 * also passes threads mode's launch-queue throttle ({@link ThreadsOptions#maxLead()}, default 8): a
 * rank more than that many transactions ahead of the slowest waits on the host, and that wait is
 * part of its figures ({@code --max-lead N} changes the lead; the C program has no throttle).
 *
 * <pre>
 * NCCL_MULTI_RANK_GPU_ENABLE=1 java --enable-native-access=ALL-UNNAMED -cp jnccl-benchmarks.jar \
 *     dev.jnccl.examples.bench.ThreadsHostCost --world 2 [--mode BLOCKING_SPLIT|NON_BLOCKING|both]
 *     [--iters 20000] [--reps 3] [--warmup 2000] [--warmup-ms 2000] [--count 1024] [--device 0]
 *     [--cases transaction,all_reduce_ordered,reduce_scatter] [--pin-cpus true|false] [--max-lead N]
 * </pre>
 */
public final class ThreadsHostCost {
    private ThreadsHostCost() {}

    /**
     * Runs the chosen modes' cases, one threads-mode pack per mode (see the class comment).
     *
     * @param args the options of the class comment
     */
    public static void main(String[] args) {
        RankHostCost.Settings settings = RankHostCost.Settings.parse(args, true, "ThreadsHostCost");
        int[] deviceOfRank = new int[settings.world()];
        Arrays.fill(deviceOfRank, settings.device());
        System.out.println("# ThreadsHostCost: " + settings.world() + " rank threads on device " + settings.device()
                + ", NCCL_MULTI_RANK_GPU_ENABLE=" + System.getenv("NCCL_MULTI_RANK_GPU_ENABLE"));
        for (CommunicatorMode mode : settings.modes()) {
            ThreadsOptions options = ThreadsOptions.defaults().withDevices(deviceOfRank)
                    .withPinCpus(settings.pinCpus())
                    .withCommunicator(CommunicatorOptions.defaults().withMode(mode));
            if (settings.maxLead() > 0) {
                options = options.withMaxLead(settings.maxLead());
            }
            System.out.println("# ThreadsHostCost: mode " + mode + ", maxLead " + options.maxLead() + ", pinCpus "
                    + options.pinCpus());
            ThreadsCommunicators.run(0, options,
                    comm -> RankHostCost.measureAll(comm, mode, settings, "threads", comm::barrier));
        }
    }
}
