package dev.jnccl.examples;

import dev.jnccl.Backend;
import dev.jnccl.Communicator;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Threads mode: the NCCL all-gather against the memcpy all-gather ({@link ThreadsOptions#memcpyAllGather}),
 * a benchmark program (not a test), reported like NVIDIA's nccl-tests {@code all_gather_perf}.
 *
 * <p>For each size (nccl-tests' convention: {@code size} is the whole output buffer in bytes, FP32;
 * each rank contributes {@code size / world}) and each transport: {@code --warmup} all-gather
 * transactions, then {@code --iterations} timed ones, back to back on each rank's comms stream,
 * between two timing events recorded on that stream. {@code time} is the mean over ranks of that
 * interval divided by the iterations (nccl-tests also averages over ranks); {@code algbw = size /
 * time}, {@code busbw = algbw * (world - 1) / world}. Each transaction is one
 * {@code comm.begin(ready).allGather(shard, full).execute(null)}; with the memcpy transport its
 * host-side rendezvous with the peers (threads mode makes each transaction collective) is part of
 * the measured time. Out of place by default (a separate shard buffer, as nccl-tests' first
 * columns), {@code --in-place} gathers into the full buffer from this rank's shard of it. After
 * the timed iterations a sample of every rank's region (first and last 4 KiB) is checked.
 *
 * <p>The header names the backend: on the host emulation the figures are host memory bandwidth
 * of the emulation's stream threads, not GPU figures.
 */
public final class AllGatherBenchmark {
    private static final Logger LOG = LoggerFactory.getLogger(AllGatherBenchmark.class);
    private static final DType TYPE = DType.FP32;
    private static final long SAMPLE = 4096;

    private AllGatherBenchmark() {}

    private record Config(int world, long minBytes, long maxBytes, int warmup, int iterations, boolean inPlace) {
        List<Long> sizes() {
            List<Long> sizes = new ArrayList<>();
            for (long s = minBytes; s <= maxBytes; s *= 2) {
                sizes.add(s);
            }
            return sizes;
        }

        /** Elements per rank's shard for {@code size}: rounded down to whole elements per rank. */
        long shardCount(long size) {
            return size / ((long) world * TYPE.size());
        }
    }

    /** One transport's figures: microseconds per all-gather, [size][rank]. */
    private record Run(String transport, double[][] micros, Backend backend, String ncclVersion) {}

    public static void main(String[] args) {
        System.exit(run(args));
    }

    static int run(String[] args) {
        Config config;
        try {
            ExampleSupport.Options options = new ExampleSupport.Options(args,
                    Set.of("--world", "--min-bytes", "--max-bytes", "--iterations", "--warmup"),
                    Set.of("--in-place", "--markdown", "--help"));
            if (options.flag("--help")) {
                System.out.println(usage());
                return 0;
            }
            long min = options.longValue("--min-bytes", 1L << 20, 1, 1L << 40);
            long max = options.longValue("--max-bytes", 1L << 30, min, 1L << 40);
            int world = options.has("--world")
                    ? ExampleSupport.checkGpus("--world", options.intValue("--world", 0, 1, 1024))
                    : ExampleSupport.defaultGpus(4);
            config = new Config(world, min, max, options.intValue("--warmup", 5, 0, 1_000_000),
                    options.intValue("--iterations", 20, 1, 1_000_000), options.flag("--in-place"));
            if (config.shardCount(max) == 0) {
                throw new ExampleSupport.UsageException("--max-bytes " + max + " is less than one " + TYPE
                        + " element per rank");
            }
            List<Run> runs = new ArrayList<>();
            for (boolean memcpy : new boolean[] {false, true}) {
                runs.add(measure(config, memcpy));
            }
            print(config, runs, options.flag("--markdown"));
            return 0;
        } catch (ExampleSupport.UsageException e) {
            System.err.println("AllGatherBenchmark: " + e.getMessage() + "\n" + usage());
            return ExampleSupport.EXIT_USAGE;
        } catch (RuntimeException | Error e) {
            System.out.println("FAILED: " + ExampleSupport.describeFailure(e));
            LOG.debug("failure", e);
            return ExampleSupport.EXIT_ERROR;
        }
    }

    private static String usage() {
        return """
                usage: AllGatherBenchmark [--world N] [--min-bytes B] [--max-bytes B] [--iterations N] [--warmup N]
                                          [--in-place] [--markdown]
                  --world N       ranks (default: all visible devices; 4 on the host emulation)
                  --min-bytes B   smallest size, the whole output buffer (default 1M; suffixes K, M, G)
                  --max-bytes B   largest size (default 1G); sizes double from min to max
                  --iterations N  timed all-gathers per size and transport (default 20)
                  --warmup N      untimed all-gathers before them (default 5)
                  --in-place      gather into the full buffer from this rank's shard of it
                  --markdown      print the table as Markdown""";
    }

    // ------------------------------------------------------------------ measurement

    private static Run measure(Config config, boolean memcpy) {
        String transport = memcpy ? "memcpy" : "nccl";
        List<Long> sizes = config.sizes();
        double[][] micros = new double[sizes.size()][config.world()];
        Backend[] backend = new Backend[1];
        String[] ncclVersion = new String[1];
        ThreadsOptions options = ThreadsOptions.defaults().withMemcpyAllGather(memcpy);
        LOG.info("{} all-gather: world {}, {} .. {}, {} warm-up + {} timed iterations per size", transport,
                config.world(), ExampleSupport.bytes(config.minBytes()), ExampleSupport.bytes(config.maxBytes()),
                config.warmup(), config.iterations());
        ThreadsCommunicators.run(config.world(), options, comm -> {
            if (comm.rank() == 0) {
                backend[0] = comm.backend();
                ncclVersion[0] = comm.ncclVersion();
            }
            rank(comm, config, transport, sizes, micros);
        });
        return new Run(transport, micros, backend[0], ncclVersion[0]);
    }

    private static void rank(Communicator comm, Config config, String transport, List<Long> sizes,
                             double[][] micros) {
        int r = comm.rank();
        int n = comm.worldSize();
        long maxShard = config.shardCount(config.maxBytes());
        try (DeviceMemory full = DeviceMemory.allocate(TYPE, maxShard * n);
             DeviceMemory send = config.inPlace() ? null : DeviceMemory.allocate(TYPE, maxShard);
             CudaStream compute = CudaStream.create();
             CudaEvent ready = CudaEvent.create();
             CudaEvent start = CudaEvent.create(true);
             CudaEvent stop = CudaEvent.create(true);
             Arena arena = Arena.ofConfined()) {
            MemorySegment sample = arena.allocate(SAMPLE);
            for (int s = 0; s < sizes.size(); s++) {
                long shardCount = config.shardCount(sizes.get(s));
                if (shardCount == 0) {
                    micros[s][r] = Double.NaN;
                    continue;
                }
                long shardBytes = shardCount * TYPE.size();
                DeviceTensor fullTensor = new DeviceTensor(full.address(), TYPE, shardCount * n);
                DeviceTensor shard = config.inPlace() ? fullTensor.shard(r, n)
                        : new DeviceTensor(send.address(), TYPE, shardCount);
                // Every byte of rank q's contribution is q + 1; the rest of the output starts at 0.
                DeviceMemory.wrap(full.address(), shardBytes * n, comm.device()).fill((byte) 0, compute);
                DeviceMemory.wrap(shard.address(), shardBytes, comm.device()).fill((byte) (r + 1), compute);
                compute.record(ready);
                comm.barrier();

                for (int i = 0; i < config.warmup(); i++) {
                    allGather(comm, ready, shard, fullTensor);
                }
                start.record(comm.stream());
                for (int i = 0; i < config.iterations(); i++) {
                    allGather(comm, ready, shard, fullTensor);
                }
                stop.record(comm.stream());
                comm.await(stop);
                micros[s][r] = stop.elapsedMillis(start) * 1000.0 / config.iterations();

                checkSample(full, shardBytes, n, sample, transport, sizes.get(s), r);
                comm.barrier(); // the next size refills buffers peers may be reading until here
                if (r == 0) {
                    LOG.info("{} {}: {} us (rank 0)", transport, ExampleSupport.bytes(sizes.get(s)),
                            String.format(Locale.ROOT, "%.1f", micros[s][r]));
                }
            }
            comm.synchronize();
            comm.barrier();
        }
    }

    private static void allGather(Communicator comm, CudaEvent ready, DeviceTensor shard, DeviceTensor full) {
        try (Transaction tx = comm.begin(ready)) {
            tx.allGather(shard, full);
            tx.execute(null);
        }
    }

    /** The first and last {@link #SAMPLE} bytes of every rank's region of the output hold that rank's byte. */
    private static void checkSample(DeviceMemory full, long shardBytes, int n, MemorySegment sample, String transport,
                                    long size, int rank) {
        for (int q = 0; q < n; q++) {
            long length = Math.min(SAMPLE, shardBytes);
            for (long offset : new long[] {q * shardBytes, (q + 1) * shardBytes - length}) {
                MemorySegment part = sample.asSlice(0, length);
                full.copyToHost(part, offset);
                for (long b = 0; b < length; b++) {
                    byte got = part.get(ValueLayout.JAVA_BYTE, b);
                    if (got != (byte) (q + 1)) {
                        throw new IllegalStateException(transport + " all-gather of " + size + " bytes is wrong on rank "
                                + rank + ": byte " + (offset + b) + " (rank " + q + "'s region) is " + got
                                + ", expected " + (q + 1));
                    }
                }
            }
        }
    }

    // ------------------------------------------------------------------ report

    private static void print(Config config, List<Run> runs, boolean markdown) {
        Run first = runs.get(0);
        int n = config.world();
        System.out.printf("# jnccl threads-mode all-gather: NCCL vs memcpy (ThreadsOptions.memcpyAllGather)%n");
        System.out.printf("# backend: %s%s, NCCL %s, world %d, %s, %s, warm-up %d, iterations %d%n",
                ExampleSupport.describe(first.backend()),
                first.backend() == Backend.HOST ? " (no GPU: host memory copies by the emulation's stream threads)" : "",
                first.ncclVersion(), n, TYPE, config.inPlace() ? "in place" : "out of place", config.warmup(),
                config.iterations());
        System.out.printf("# size = output buffer bytes (shard = size / %d); time = mean over ranks of CUDA-event time "
                + "per all-gather on the comms stream; algbw = size / time; busbw = algbw * (%d-1)/%d; mc/nccl = NCCL time "
                + "/ memcpy time (= memcpy busbw / NCCL busbw)%n", n, n, n);
        List<Long> sizes = config.sizes();
        if (markdown) {
            System.out.println();
            System.out.println("| size (B) | count | NCCL time (us) | NCCL algbw (GB/s) | NCCL busbw (GB/s) "
                    + "| memcpy time (us) | memcpy algbw (GB/s) | memcpy busbw (GB/s) | memcpy / NCCL busbw |");
            System.out.println("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        } else {
            System.out.printf("#%13s %12s   %11s %9s %9s   %11s %9s %9s   %8s%n", "", "", "nccl", "", "", "memcpy", "",
                    "", "");
            System.out.printf("#%13s %12s   %11s %9s %9s   %11s %9s %9s   %8s%n", "size(B)", "count", "time(us)",
                    "algbw", "busbw", "time(us)", "algbw", "busbw", "mc/nccl");
        }
        for (int s = 0; s < sizes.size(); s++) {
            long shardCount = config.shardCount(sizes.get(s));
            if (shardCount == 0) {
                continue;
            }
            long count = shardCount * n;
            long bytes = count * TYPE.size();
            double[] us = new double[runs.size()];
            double[] alg = new double[runs.size()];
            double[] bus = new double[runs.size()];
            for (int t = 0; t < runs.size(); t++) {
                us[t] = mean(runs.get(t).micros()[s]);
                alg[t] = bytes / us[t] / 1e3; // bytes per microsecond / 1000 = GB/s
                bus[t] = alg[t] * (n - 1) / n;
            }
            double ratio = us[0] / us[1];
            if (markdown) {
                System.out.printf(Locale.ROOT, "| %d | %d | %.1f | %.2f | %.2f | %.1f | %.2f | %.2f | %.2fx |%n", bytes,
                        count, us[0], alg[0], bus[0], us[1], alg[1], bus[1], ratio);
            } else {
                System.out.printf(Locale.ROOT, " %13d %12d   %11.1f %9.2f %9.2f   %11.1f %9.2f %9.2f   %7.2fx%n", bytes,
                        count, us[0], alg[0], bus[0], us[1], alg[1], bus[1], ratio);
            }
        }
    }

    private static double mean(double[] values) {
        double sum = 0;
        for (double v : values) {
            sum += v;
        }
        return sum / values.length;
    }
}
