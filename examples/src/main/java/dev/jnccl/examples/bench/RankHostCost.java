package dev.jnccl.examples.bench;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorMode;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.examples.ExampleSupport;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * What one rank measures in the host-cost programs {@link MultiRankHostCost} (one process per rank)
 * and {@link ThreadsHostCost} (ranks as threads of one process): the settings both parse, and the
 * timed loops, the same as {@code transaction_overhead.c}'s. Per case, on the rank's communicator:
 * {@code warmup} operations, then {@code reps} repetitions of {@code iters} operations, the comms
 * stream synchronized after every {@value QueueBound#SYNC_EVERY}th operation inside the timed loop
 * (its time is kept apart: the host-only "enqueue" figure), and the rank's {@code barrier} before
 * the warm-up and before every repetition (threads mode: the ranks' repetitions overlap, as the C
 * program's threads do; one process per rank: nothing). One parseable line per case:
 * {@code RESULT impl=jnccl case=transaction mode=BLOCKING_SPLIT launch=threads world=2 rank=0 median_us=...
 * min_us=... enqueue_median_us=... enqueue_min_us=... iters=... reps=... samples_us=...}.
 */
final class RankHostCost {
    private static final int SYNC_EVERY = QueueBound.SYNC_EVERY;
    /**
     * Every case, in the order they run. {@code reduce_scatter} and {@code reduce_scatter_ordered}
     * time the same call: the first name is the torch comparison's, the second pairs with the C
     * program's case of that name, as every {@code *_ordered} case does.
     */
    static final List<String> CASES = List.of("transaction", "all_reduce_ordered", "reduce_scatter",
            "reduce_scatter_ordered", "broadcast_ordered", "all_to_all_ordered", "reduce_mean_ordered",
            "reduce_max_ordered", "reduce_norm_squared_ordered");

    private RankHostCost() {}

    /**
     * The command line of both programs. {@code world}: the ranks (of the world, or of the process
     * in threads mode); {@code rank} and {@code idFile}: one process per rank only.
     */
    record Settings(int world, int rank, int device, int count, long iters, long warmup, int reps, String idFile,
                    List<CommunicatorMode> modes, List<String> cases, boolean pinCpus, int maxLead, long warmupMs) {

        /**
         * Parses {@code --world --rank --device --count --iters --warmup --warmup-ms --reps --id-file --mode
         * BLOCKING_SPLIT|NON_BLOCKING|both --cases a,b --pin-cpus true|false --max-lead N}; {@code --warmup-ms}:
         * the warm-up also lasts at least that long (default 2000, as PairedHostCost's; 0: by count only, which
         * leaves short loops JIT-cold on a fast machine);
         * {@code threads}: the ranks are threads of this process (no --rank or --id-file; --pin-cpus
         * and --max-lead, ThreadsOptions' CPU pinning and launch-queue lead, allowed; 0: jnccl's default).
         */
        static Settings parse(String[] args, boolean threads, String program) {
            int world = 1;
            int rank = 0;
            int device = 0;
            int count = 1024;
            long iters = 20_000;
            long warmup = 2_000;
            int reps = 3;
            String idFile = null;
            String modes = "both";
            String cases = String.join(",", CASES);
            boolean pinCpus = true;
            int maxLead = 0;
            long warmupMs = 2_000;
            for (int i = 0; i < args.length; i += 2) {
                String name = args[i];
                if (i + 1 >= args.length) {
                    throw new IllegalArgumentException(program + ": " + name + " needs a value");
                }
                String value = args[i + 1];
                switch (name) {
                    case "--world" -> world = Integer.parseInt(value);
                    case "--device" -> device = Integer.parseInt(value);
                    case "--count" -> count = Integer.parseInt(value);
                    case "--iters" -> iters = Long.parseLong(value);
                    case "--warmup" -> warmup = Long.parseLong(value);
                    case "--warmup-ms" -> warmupMs = Long.parseLong(value);
                    case "--reps" -> reps = Integer.parseInt(value);
                    case "--mode" -> modes = value;
                    case "--cases" -> cases = value;
                    case "--rank" -> rank = threads ? refused(program, name) : Integer.parseInt(value);
                    case "--id-file" -> idFile = threads ? refused(program, name) : value;
                    case "--pin-cpus" -> pinCpus = threads ? Boolean.parseBoolean(value) : refused(program, name);
                    case "--max-lead" -> maxLead = threads ? Integer.parseInt(value) : refused(program, name);
                    default -> throw new IllegalArgumentException(program + ": unknown argument " + name
                            + " (see the javadoc of " + program + ")");
                }
            }
            List<String> caseList = List.of(cases.split(","));
            for (String c : caseList) {
                if (!CASES.contains(c)) {
                    throw new IllegalArgumentException(program + ": unknown case " + c + " in --cases " + cases
                            + " (known: " + String.join(",", CASES) + ")");
                }
            }
            if (world < 1 || rank < 0 || rank >= world || (!threads && world > 1 && idFile == null)
                    || count % world != 0 || iters < SYNC_EVERY || warmup < 1 || warmupMs < 0 || reps < 1 || maxLead < 0) {
                throw new IllegalArgumentException(program + ": bad arguments: world " + world + ", rank " + rank
                        + ", id file " + idFile + " (needed by one process per rank at a world above 1), count "
                        + count + " (divisible by the world size), iters " + iters + " (>= " + SYNC_EVERY
                        + "), warmup " + warmup + " (>= 1), warmup-ms " + warmupMs + " (>= 0), reps " + reps + " (>= 1), max lead " + maxLead + " (>= 0)");
            }
            List<CommunicatorMode> chosen = modes.equals("both") ? List.of(CommunicatorMode.values())
                    : List.of(CommunicatorMode.valueOf(modes));
            return new Settings(world, rank, device, count, iters, warmup, reps, idFile, chosen, caseList, pinCpus,
                    maxLead, warmupMs);
        }

        private static <T> T refused(String program, String name) {
            throw new IllegalArgumentException(program + ": " + name + " is not an option of this program");
        }
    }

    /**
     * Runs every case of {@code settings} on {@code comm} (whose rank's device is current) and
     * prints their RESULT lines.
     *
     * @param launch  {@code process} or {@code threads}, for the RESULT line
     * @param barrier the rank's meeting point before each timed repetition
     */
    static void measureAll(Communicator comm, CommunicatorMode mode, Settings settings, String launch,
                           Runnable barrier) {
        int count = settings.count();
        try (CudaStream compute = CudaStream.create(); CudaEvent ready = CudaEvent.create();
             CudaEvent signal = CudaEvent.create(); DeviceMemory memory = DeviceMemory.allocate(DType.FP32, count);
             DeviceMemory received = DeviceMemory.allocate(DType.FP32, count)) {
            memory.fill((byte) 0, compute);
            received.fill((byte) 0, compute);
            compute.record(ready);
            compute.synchronize();
            DeviceTensor tensor = memory.tensor(DType.FP32);
            DeviceTensor shard = tensor.shard(comm.rank(), comm.worldSize());
            DeviceTensor recv = received.tensor(DType.FP32); // all_to_all_ordered: tensor -> recv
            DeviceTensor value = tensor.slice(0, 1); // reduce_norm_squared_ordered: one FP32 element
            System.out.println("# jnccl rank " + comm.rank() + " of " + comm.worldSize() + " (" + launch
                    + "), device " + comm.device() + ", backend " + ExampleSupport.backendName(comm.backend()) + ", NCCL " + comm.ncclVersion()
                    + ", mode " + mode + ", watchdog " + (comm.options().watchdogEnabled() ? "on" : "off") + ", sync " + SYNC + ", "
                    + count + " x FP32");
            for (String name : settings.cases()) {
                Runnable op = switch (name) {
                    case "transaction" -> () -> comm.begin(ready).reduceScatter(tensor).allGather(shard, tensor)
                            .execute(signal);
                    case "all_reduce_ordered" -> () -> comm.allReduce(tensor, ReduceOp.SUM, compute);
                    case "reduce_scatter", "reduce_scatter_ordered" -> () -> comm.reduceScatter(tensor, compute);
                    case "broadcast_ordered" -> () -> comm.broadcast(tensor, 0, compute);
                    case "all_to_all_ordered" -> () -> comm.allToAll(tensor, recv, compute);
                    case "reduce_mean_ordered" -> () -> comm.reduceMean(tensor, compute);
                    case "reduce_max_ordered" -> () -> comm.reduceMax(tensor, compute);
                    case "reduce_norm_squared_ordered" -> () -> comm.reduceNormSquared(value, compute);
                    default -> throw new IllegalArgumentException("unknown case " + name);
                };
                measure(name, comm, mode, settings, launch, barrier, op);
            }
            compute.synchronize();
        }
    }

    /**
     * How the timed loops wait for the comms stream: {@code -Djnccl.bench.sync=jnccl} (default)
     * through {@link CudaStream#synchronize()} (it polls cudaStreamQuery and parks between polls),
     * {@code cuda} through cudaStreamSynchronize itself (the driver waits, as the C program does):
     * tells apart what the way of waiting does to the device's pace when ranks time-slice one GPU.
     */
    private static final String SYNC = System.getProperty("jnccl.bench.sync", "jnccl");

    private static Runnable synchronizer(CudaStream comms) {
        return switch (SYNC) {
            case "jnccl" -> comms::synchronize;
            case "cuda" -> () -> {
                int result = CudaRuntime.cudaStreamSynchronize(comms.handle());
                if (result != 0) {
                    throw new IllegalStateException("cudaStreamSynchronize failed: cudaError " + result);
                }
            };
            default -> throw new IllegalArgumentException("-Djnccl.bench.sync=" + SYNC + ": expected jnccl or cuda");
        };
    }

    private static void measure(String name, Communicator comm, CommunicatorMode mode, Settings settings,
                                String launch, Runnable barrier, Runnable op) {
        Runnable sync = synchronizer(comm.stream());
        long iters = settings.iters();
        int reps = settings.reps();
        long[] syncNanos = new long[1];
        Runnable timed = () -> {
            for (long i = 1; i <= iters; i++) {
                op.run();
                if ((i & (SYNC_EVERY - 1)) == 0) {
                    long start = System.nanoTime();
                    sync.run();
                    syncNanos[0] += System.nanoTime() - start;
                }
            }
        };
        barrier.run();
        warmUp(comm, settings, op, sync);
        double[] all = new double[reps];
        double[] enqueue = new double[reps];
        List<String> samples = new ArrayList<>();
        for (int r = 0; r < reps; r++) {
            barrier.run();
            syncNanos[0] = 0;
            long start = System.nanoTime();
            timed.run();
            long elapsed = System.nanoTime() - start;
            sync.run();
            all[r] = elapsed / 1000.0 / iters;
            enqueue[r] = (elapsed - syncNanos[0]) / 1000.0 / iters;
            samples.add(String.format(Locale.ROOT, "%.3f", all[r]));
        }
        System.out.printf(Locale.ROOT, "RESULT impl=jnccl case=%s mode=%s launch=%s world=%d rank=%d median_us=%.3f"
                        + " min_us=%.3f enqueue_median_us=%.3f enqueue_min_us=%.3f iters=%d reps=%d samples_us=%s%n",
                name, mode, launch, comm.worldSize(), comm.rank(), median(all), Arrays.stream(all).min().orElseThrow(),
                median(enqueue), Arrays.stream(enqueue).min().orElseThrow(), iters, reps, String.join(",", samples));
    }

    /**
     * {@code --warmup} operations, then more, {@value QueueBound#SYNC_EVERY} at a time, until
     * {@code --warmup-ms} have passed on every rank: a count alone leaves short loops JIT-cold on a fast
     * machine. The ranks agree after every round (a host gather), so that they stop together and
     * their collectives pair.
     */
    private static void warmUp(Communicator comm, Settings settings, Runnable op, Runnable sync) {
        long start = System.nanoTime();
        for (long i = 1; i <= settings.warmup(); i++) {
            op.run();
            if ((i & (SYNC_EVERY - 1)) == 0) {
                sync.run();
            }
        }
        sync.run();
        long warmupNanos = settings.warmupMs() * 1_000_000;
        if (warmupNanos == 0) {
            return; // by count only, as before the option: no host gather
        }
        while (!Arrays.stream(comm.allGatherLongsHost(System.nanoTime() - start >= warmupNanos ? 1 : 0))
                .allMatch(done -> done == 1)) {
            for (int i = 0; i < SYNC_EVERY; i++) {
                op.run();
            }
            sync.run();
        }
    }

    private static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }
}
