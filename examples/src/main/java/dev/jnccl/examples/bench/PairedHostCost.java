package dev.jnccl.examples.bench;

import dev.jnccl.CommunicatorMode;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import java.util.Arrays;
import java.util.List;

/**
 * jnccl's own host cost, paired: in one process (threads mode, W ranks as threads, all on one
 * device) the same communicators are driven alternately by jnccl and by its {@link RawTwin}, the
 * raw bindings making exactly the native calls jnccl makes, in interleaved blocks of {@code --calls}
 * operations ({@code --blocks} of each side, the side that goes first alternating), every rank in
 * lock-step (a barrier before each block). Whatever time-slices the GPU and the CPUs (the ranks
 * share both) hits both sides of a pair alike, so the ratio of a pair measures jnccl's own work
 * around the native calls: per case, the median over the blocks of jnccl's per-call time over the
 * twin's, with its spread, and the per-call times of both. At world 1 it is the noise floor.
 *
 * <p>Per case: a warm-up of both sides, by count ({@code --warmup-calls}) and by time
 * ({@code --warmup-ms}, agreed between the ranks), then the blocks. In a block the comms stream and
 * the caller's stream are synchronized after every {@value QueueBound#SYNC_EVERY}th call and at its
 * end, for both sides by the same raw cudaStreamSynchronize calls; "host" leaves that time out.
 * Before the cases, each rank checks once, element by element on random data, that an all-reduce
 * of the twin and one of jnccl give the sum over the ranks ({@code CHECK} lines; a mismatch fails).
 * One line per rank and case:
 * {@code PAIRED case=transaction mode=BLOCKING_SPLIT world=2 rank=0 blocks=20 calls=1000 ratio_median=...
 * ratio_q1=... ratio_q3=... ratio_min=... ratio_max=... host_ratio_median=... host_ratio_min=...
 * host_ratio_max=... jnccl_us=... raw_us=... jnccl_host_us=... raw_host_us=...} (the us figures:
 * medians over the blocks).
 *
 * <p>Several ranks of one process on one GPU need NCCL 2.30 or newer with
 * {@code NCCL_MULTI_RANK_GPU_ENABLE=1}; scripts/gpu/gpu-hostcost-paired.sh runs it.
 *
 * <pre>
 * java --enable-native-access=ALL-UNNAMED -cp jnccl-benchmarks.jar dev.jnccl.examples.bench.PairedHostCost
 *     [--world 2] [--device 0] [--mode BLOCKING_SPLIT|NON_BLOCKING] [--max-lead N] [--blocks 20]
 *     [--calls 1000] [--warmup-ms 2000] [--warmup-calls 2000] [--count 1024] [--cases a,b] [--pin-cpus true]
 * </pre>
 */
public final class PairedHostCost {
    /** Every case, in the order they run: the transaction, then each convenience operation. */
    static final List<String> CASES = List.of("transaction", "all_reduce", "reduce_scatter", "all_gather",
            "broadcast", "all_to_all", "reduce_mean", "reduce_max", "reduce_norm_squared");

    private PairedHostCost() {}

    /** The command line (see the class comment); {@code maxLead} 0: jnccl's default. */
    record Settings(int world, int device, CommunicatorMode mode, int maxLead, int blocks, int calls, long warmupMs,
                    long warmupCalls, int count, List<String> cases, boolean pinCpus) {

        static Settings parse(String[] args) {
            String[] v = {"2", "0", "BLOCKING_SPLIT", "0", "20", "1000", "2000", "2000", "1024",
                    String.join(",", CASES), "true"};
            List<String> names = List.of("--world", "--device", "--mode", "--max-lead", "--blocks", "--calls",
                    "--warmup-ms", "--warmup-calls", "--count", "--cases", "--pin-cpus");
            for (int i = 0; i < args.length; i += 2) {
                int at = names.indexOf(args[i]);
                if (at < 0 || i + 1 >= args.length) {
                    throw new IllegalArgumentException("PairedHostCost: unknown argument or missing value: " + args[i]
                            + " (known: " + names + ")");
                }
                v[at] = args[i + 1];
            }
            Settings s = new Settings(Integer.parseInt(v[0]), Integer.parseInt(v[1]), CommunicatorMode.valueOf(v[2]),
                    Integer.parseInt(v[3]), Integer.parseInt(v[4]), Integer.parseInt(v[5]), Long.parseLong(v[6]),
                    Long.parseLong(v[7]), Integer.parseInt(v[8]), List.of(v[9].split(",")), Boolean.parseBoolean(v[10]));
            s.check();
            return s;
        }

        private void check() {
            for (String c : cases) {
                if (!CASES.contains(c)) {
                    throw new IllegalArgumentException("PairedHostCost: unknown case " + c + " (known: "
                            + String.join(",", CASES) + ")");
                }
            }
            if (world < 1 || count < 1 || count % world != 0 || blocks < 2 || calls < 1 || warmupMs < 0
                    || warmupCalls < 0 || maxLead < 0) {
                throw new IllegalArgumentException("PairedHostCost: bad arguments: world " + world + " (>= 1), count "
                        + count + " (>= 1, divisible by the world), blocks " + blocks + " (>= 2), calls " + calls
                        + " (>= 1), warmup-ms " + warmupMs + " and warmup-calls " + warmupCalls + " (>= 0), max-lead "
                        + maxLead + " (>= 0)");
            }
        }
    }

    /**
     * Runs every case of the settings on a threads-mode pack and prints the lines of the class comment.
     *
     * @param args the options of the class comment
     */
    public static void main(String[] args) {
        Settings settings = Settings.parse(args);
        int[] deviceOfRank = new int[settings.world()];
        Arrays.fill(deviceOfRank, settings.device());
        ThreadsOptions options = ThreadsOptions.defaults().withDevices(deviceOfRank).withPinCpus(settings.pinCpus())
                .withCommunicator(CommunicatorOptions.defaults().withMode(settings.mode()));
        if (settings.maxLead() > 0) {
            options = options.withMaxLead(settings.maxLead());
        }
        System.out.println("# PairedHostCost: " + settings + ", maxLead " + options.maxLead()
                + ", NCCL_MULTI_RANK_GPU_ENABLE=" + System.getenv("NCCL_MULTI_RANK_GPU_ENABLE"));
        ThreadsCommunicators.run(0, options, comm -> PairedRank.run(comm, settings));
    }
}
