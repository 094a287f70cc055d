package dev.jnccl.examples;

import static java.lang.foreign.ValueLayout.JAVA_INT;

import dev.jnccl.AllToAllSchedule;
import dev.jnccl.Backend;
import dev.jnccl.Communicator;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.mpi.MpiCommunicators;
import dev.jnccl.mpi.MpiOptions;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The example program of jnccl: threads mode (one JVM thread per GPU), a destructive all-to-all and
 * a ring exchange, every element checked on the host.
 *
 * <p>Each iteration, on every rank {@code r} of {@code n}:
 * <ol>
 *   <li>fills an INT32 tensor of {@code n} slots of {@code --elements} elements each; element
 *       {@code i} of slot {@code s} (the shard meant for rank {@code s}) is
 *       {@code tag*100_000_000 + r*1_000_000 + s*10_000 + i%10_000}, with {@code tag} the
 *       iteration number mod 20, plus 1 (so a value left from an earlier iteration is caught);</li>
 *   <li>transaction 1: {@code destructiveAllToAll} of that tensor;</li>
 *   <li>transaction 2 (after the first, {@code n > 1}): sends the whole tensor to rank {@code r+1}
 *       and receives rank {@code r-1}'s into a second tensor (cleared to -1 beforehand);</li>
 *   <li>checks both tensors against the layout that {@link AllToAllSchedule} documents: slot
 *       {@code s} of rank {@code q} holds rank {@code sourceOfSlot(q, n, s)}'s shard for {@code q},
 *       and the stale slot ({@code staleSlot(q, n)}) still holds {@code q}'s own shard for rank
 *       {@code s}.</li>
 * </ol>
 * All ranks stop after the first iteration in which any rank found a mismatch.
 *
 * <p>Options: {@code --gpus N} (default: all visible devices; at most 4 on the host emulation),
 * {@code --elements N} per slot (default 262144: 1 MiB per slot), {@code --iterations N} (default
 * 5), {@code --memcpy} (threads mode's memcpy transports for sends/receives and all-gathers;
 * the all-to-all always uses NCCL). Exit status: 0 OK, 1 verification failed, 2 bad command line,
 * 3 jnccl failed.
 */
public final class RingAllToAll {
    private static final Logger LOG = LoggerFactory.getLogger(RingAllToAll.class);
    private static final int MAX_REPORTED = 5;
    private static final int MAX_WORLD = 100; // the value encoding has two decimal digits for ranks and slots

    private RingAllToAll() {}

    /** What one rank did. */
    private record RankResult(int rank, int device, Backend backend, String ncclVersion, int iterations,
                              long checked, long mismatches, List<String> firstMismatches, long commNanos,
                              long loopNanos) {}

    /**
     * Runs the example and exits with its status: 0 when every element matched.
     *
     * @param args the command line ({@code --help} lists it)
     */
    public static void main(String[] args) {
        System.exit(run(args));
    }

    static int run(String[] args) {
        int gpus;
        long elements;
        int iterations;
        boolean memcpy;
        String launcher;
        try {
            ExampleSupport.Options options = new ExampleSupport.Options(args,
                    Set.of("--gpus", "--elements", "--iterations", "--launcher"), Set.of("--memcpy", "--help"));
            if (options.flag("--help")) {
                System.out.println(usage());
                return 0;
            }
            elements = options.longValue("--elements", 262_144, 1, 1L << 28);
            iterations = options.intValue("--iterations", 5, 1, 1_000_000);
            memcpy = options.flag("--memcpy");
            launcher = options.has("--launcher") ? options.value("--launcher") : "threads";
            if (launcher.equals("mpi")) {
                if (options.has("--gpus") || memcpy) {
                    throw new ExampleSupport.UsageException("--launcher mpi: one process per rank (mpirun -np N);"
                            + " --gpus and --memcpy are threads-mode options");
                }
                return runMpi(elements, iterations);
            }
            if (!launcher.equals("threads")) {
                throw new ExampleSupport.UsageException("--launcher '" + launcher + "': expected threads or mpi");
            }
            gpus = options.has("--gpus")
                    ? ExampleSupport.checkGpus("--gpus", options.intValue("--gpus", 0, 1, MAX_WORLD))
                    : Math.min(ExampleSupport.defaultGpus(4), MAX_WORLD);
        } catch (ExampleSupport.UsageException e) {
            System.err.println("RingAllToAll: " + e.getMessage() + "\n" + usage());
            return ExampleSupport.EXIT_USAGE;
        } catch (RuntimeException | Error e) { // e.g. no libraries, or no device, with jnccl.backend=cuda
            System.out.println("FAILED: " + ExampleSupport.describeFailure(e));
            LOG.debug("failure", e);
            return ExampleSupport.EXIT_ERROR;
        }

        ThreadsOptions threads = ThreadsOptions.defaults().withMemcpyAllGather(memcpy).withMemcpySendRecv(memcpy);
        RankResult[] results = new RankResult[gpus];
        LOG.info("RingAllToAll: {} rank(s), {} INT32 elements per slot ({} per rank), {} iteration(s), transports: {}",
                gpus, elements, ExampleSupport.bytes(elements * gpus * Integer.BYTES), iterations,
                memcpy ? "memcpy send/recv + all-gather" : "NCCL");
        long started = System.nanoTime();
        try {
            ThreadsCommunicators.run(gpus, threads,
                    comm -> results[comm.rank()] = rank(comm, elements, iterations));
        } catch (RuntimeException | Error e) {
            System.out.println("FAILED: jnccl reported an error: " + ExampleSupport.describeFailure(e));
            LOG.debug("failure", e);
            return ExampleSupport.EXIT_ERROR;
        }
        long wall = System.nanoTime() - started;
        return report(results, elements, memcpy, wall);
    }

    /**
     * MPI mode: this process is one rank (started by mpirun); every rank's result is gathered over MPI
     * and rank 0 prints the report. Every rank exits with the same status.
     */
    private static int runMpi(long elements, int iterations) {
        int[] status = {ExampleSupport.EXIT_ERROR};
        try {
            MpiCommunicators.run(MpiOptions.defaults(), comm -> {
                if (comm.rank() == 0) {
                    System.out.println("launcher: MPI, " + comm.worldSize() + " process(es), one rank each; "
                            + MpiCommunicators.library());
                    System.out.println("backend: " + ExampleSupport.describe(comm.backend()));
                    System.out.flush();
                }
                long started = System.nanoTime();
                RankResult mine = rank(comm, elements, iterations);
                RankResult[] results = comm.allGatherBytesHost(encode(mine)).stream().map(RingAllToAll::decodeResult)
                        .toArray(RankResult[]::new);
                long wall = System.nanoTime() - started;
                if (comm.rank() == 0) {
                    status[0] = report(results, elements, false, wall);
                } else {
                    status[0] = java.util.Arrays.stream(results).allMatch(r -> r.mismatches() == 0) ? 0 : 1;
                }
            });
        } catch (RuntimeException | Error e) { // MPI not loadable, or MPI refused (run aborts the job for the rest)
            System.out.println("FAILED: " + ExampleSupport.describeFailure(e));
            LOG.debug("failure", e);
            return ExampleSupport.EXIT_ERROR;
        }
        return status[0];
    }

    /**
     * One rank of the example under a launcher this module does not depend on (Spark barrier mode:
     * jnccl-spark's {@code SparkRingAllToAll}, which keeps Spark off this module's class path): the
     * iterations and checks of {@link #main}, the result encoded for {@link #report(List, long, long)}.
     *
     * @param comm       this rank's communicator
     * @param elements   INT32 elements per slot, 1 or more
     * @param iterations all-to-all + ring rounds, 1 or more
     * @return this rank's result, to be gathered (in rank order) by the launcher
     * @throws IllegalArgumentException when {@code elements} or {@code iterations} is below 1, or the
     *         world is larger than the value encoding allows (100 ranks)
     */
    public static byte[] runRank(Communicator comm, long elements, int iterations) {
        if (elements < 1 || iterations < 1) {
            throw new IllegalArgumentException("runRank: elements " + elements + " and iterations " + iterations
                    + " must be in [1, " + Long.MAX_VALUE + "] and [1, " + Integer.MAX_VALUE + "]");
        }
        if (comm.worldSize() > MAX_WORLD) {
            throw new IllegalArgumentException("runRank: world size " + comm.worldSize() + " is out of range [1, "
                    + MAX_WORLD + "]");
        }
        return encode(rank(comm, elements, iterations));
    }

    /**
     * Prints the report of {@link #main} for the results of {@link #runRank} (every rank's, in rank
     * order), ending with {@code OK} when every element matched.
     *
     * @param results   every rank's encoded result, index = rank
     * @param elements  INT32 elements per slot
     * @param wallNanos the whole run's time, start-up included
     * @return the exit status: 0 OK, 1 verification failed
     */
    public static int report(List<byte[]> results, long elements, long wallNanos) {
        return report(results.stream().map(RingAllToAll::decodeResult).toArray(RankResult[]::new), elements, false,
                wallNanos);
    }

    private static byte[] encode(RankResult result) {
        java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        try (java.io.DataOutputStream out = new java.io.DataOutputStream(bytes)) {
            out.writeInt(result.rank());
            out.writeInt(result.device());
            out.writeUTF(result.backend().name());
            out.writeUTF(result.ncclVersion());
            out.writeInt(result.iterations());
            out.writeLong(result.checked());
            out.writeLong(result.mismatches());
            out.writeInt(result.firstMismatches().size());
            for (String line : result.firstMismatches()) {
                out.writeUTF(line);
            }
            out.writeLong(result.commNanos());
            out.writeLong(result.loopNanos());
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
        return bytes.toByteArray();
    }

    private static RankResult decodeResult(byte[] bytes) {
        try (java.io.DataInputStream in = new java.io.DataInputStream(new java.io.ByteArrayInputStream(bytes))) {
            int rank = in.readInt();
            int device = in.readInt();
            Backend backend = Backend.valueOf(in.readUTF());
            String nccl = in.readUTF();
            int iterations = in.readInt();
            long checked = in.readLong();
            long mismatches = in.readLong();
            List<String> first = new ArrayList<>();
            for (int i = in.readInt(); i > 0; i--) {
                first.add(in.readUTF());
            }
            return new RankResult(rank, device, backend, nccl, iterations, checked, mismatches, first, in.readLong(),
                    in.readLong());
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    private static String usage() {
        return """
                usage: RingAllToAll [--gpus N] [--elements N] [--iterations N] [--memcpy] [--launcher threads|mpi]
                  --gpus N        ranks, one thread and GPU each (default: all visible devices; 4 on the host emulation)
                  --elements N    INT32 elements per slot; each rank's tensor has one slot per rank (default 262144;
                                  suffixes K, M: 64K = 65536)
                  --iterations N  all-to-all + ring rounds, each checked (default 5)
                  --memcpy        threads mode's memcpy transports for send/recv and all-gather (the all-to-all
                                  always uses NCCL)
                  --launcher L    threads (default: one JVM, one thread per GPU) or mpi (this process is one rank
                                  of an mpirun job; scripts/run-example.sh --launcher mpi --ranks N starts it)
                exit status: 0 OK, 1 verification failed, 2 bad command line, 3 jnccl failed""";
    }

    // ------------------------------------------------------------------ one rank

    private static RankResult rank(Communicator comm, long slotElements, int iterations) {
        int r = comm.rank();
        int n = comm.worldSize();
        int next = (r + 1) % n;
        int prev = (r + n - 1) % n;
        long count = slotElements * n;
        List<String> reported = new ArrayList<>();
        long checked = 0;
        long mismatches = 0;
        long commNanos = 0;
        int done = 0;
        long loopNanos = 0;
        try (DeviceMemory a2aMemory = DeviceMemory.allocate(DType.INT32, count);
             DeviceMemory ringMemory = DeviceMemory.allocate(DType.INT32, count);
             CudaStream compute = CudaStream.create();
             CudaEvent a2aDone = CudaEvent.create();
             CudaEvent ringDone = CudaEvent.create();
             Arena arena = Arena.ofConfined()) {
            DeviceTensor a2a = a2aMemory.tensor(DType.INT32);
            DeviceTensor ring = ringMemory.tensor(DType.INT32);
            MemorySegment host = arena.allocate(JAVA_INT, count);
            long loopStart = System.nanoTime();
            for (int it = 0; it < iterations; it++) {
                int tag = it % 20 + 1;
                fill(host, tag, r, n, slotElements);
                a2aMemory.copyFromHost(host);
                // A copy from pageable host memory may return before its DMA has landed, and it runs
                // on the legacy stream, which the (non-blocking) comms stream does not wait for.
                Cuda.synchronize();
                ringMemory.fill((byte) 0xFF, compute); // -1 everywhere: "never written"
                comm.barrier(); // time the communication, not the slowest rank's fill

                long t0 = System.nanoTime();
                try (Transaction tx = comm.begin(compute)) {
                    tx.destructiveAllToAll(a2a);
                    tx.execute(a2aDone);
                }
                CudaEvent last = a2aDone;
                if (n > 1) {
                    try (Transaction tx = comm.begin(a2aDone)) {
                        tx.send(a2a, next).recv(ring, prev);
                        tx.execute(ringDone);
                    }
                    last = ringDone;
                }
                comm.await(last);
                commNanos += System.nanoTime() - t0;

                long before = mismatches;
                a2aMemory.copyToHost(host);
                mismatches += check(host, tag, r, n, slotElements, it, "all-to-all result", reported);
                checked += count;
                if (n > 1) {
                    ringMemory.copyToHost(host);
                    mismatches += check(host, tag, prev, n, slotElements, it,
                            "ring buffer (rank " + prev + "'s all-to-all result)", reported);
                    checked += count;
                }
                done++;
                // Every rank must run the same transactions: stop together once anyone saw a mismatch.
                long any = 0;
                for (long m : comm.allGatherLongsHost(mismatches - before)) {
                    any += m;
                }
                if (any > 0) {
                    break;
                }
            }
            loopNanos = System.nanoTime() - loopStart;
            comm.synchronize();
            comm.barrier(); // nobody frees memory a peer might still read
        }
        return new RankResult(r, comm.device(), comm.backend(), comm.ncclVersion(), done, checked, mismatches,
                List.copyOf(reported), commNanos, loopNanos);
    }

    static int value(int tag, int source, int slot, long index) {
        return tag * 100_000_000 + source * 1_000_000 + slot * 10_000 + (int) (index % 10_000);
    }

    private static String decode(int v) {
        if (v == -1) {
            return "-1: never written";
        }
        if (v < 0) {
            return "not a value of this program";
        }
        return "iteration tag " + v / 100_000_000 + ", from rank " + v / 1_000_000 % 100 + ", slot "
                + v / 10_000 % 100 + ", index mod 10000 = " + v % 10_000;
    }

    private static void fill(MemorySegment host, int tag, int rank, int n, long slotElements) {
        for (int slot = 0; slot < n; slot++) {
            long base = slot * slotElements;
            for (long i = 0; i < slotElements; i++) {
                host.setAtIndex(JAVA_INT, base + i, value(tag, rank, slot, i));
            }
        }
    }

    /**
     * Checks {@code host}, rank {@code q}'s tensor after the all-to-all, against AllToAllSchedule's
     * layout; returns the number of wrong elements and adds the first ones to {@code reported}.
     */
    private static long check(MemorySegment host, int tag, int q, int n, long slotElements, int iteration,
                              String buffer, List<String> reported) {
        long wrong = 0;
        int stale = AllToAllSchedule.staleSlot(q, n);
        for (int slot = 0; slot < n; slot++) {
            int source = AllToAllSchedule.sourceOfSlot(q, n, slot);
            // Stale slot: q's own shard for rank `slot`, untouched. Otherwise: `source`'s shard for q.
            int from = source < 0 ? q : source;
            int meantFor = source < 0 ? slot : q;
            if (source < 0 && slot != stale) {
                throw new IllegalStateException("AllToAllSchedule: slot " + slot + " has no source but the stale slot is "
                        + stale);
            }
            long base = slot * slotElements;
            for (long i = 0; i < slotElements; i++) {
                int expected = value(tag, from, meantFor, i);
                int got = host.getAtIndex(JAVA_INT, base + i);
                if (got != expected) {
                    wrong++;
                    if (reported.size() < MAX_REPORTED) {
                        reported.add("iteration " + iteration + ", " + buffer + ", slot " + slot + " ("
                                + (source < 0 ? "stale: rank " + q + "'s own shard for rank " + slot
                                : "rank " + source + "'s shard for rank " + q) + "), element " + i + ": expected "
                                + expected + ", got " + got + " (" + decode(got) + ")");
                    }
                }
            }
        }
        return wrong;
    }

    // ------------------------------------------------------------------ report

    private static int report(RankResult[] results, long slotElements, boolean memcpy, long wallNanos) {
        int n = results.length;
        long totalMismatches = 0;
        long slowestComm = 0;
        long slowestLoop = 0;
        for (RankResult res : results) {
            int iters = Math.max(res.iterations(), 1);
            System.out.printf("rank %d (device %d): %d iteration(s), %,d elements checked, all-to-all + ring %.3f ms"
                            + "/iteration, %s%n", res.rank(), res.device(), res.iterations(), res.checked(),
                    res.commNanos() / 1e6 / iters,
                    res.mismatches() == 0 ? "OK" : res.mismatches() + " MISMATCHES");
            totalMismatches += res.mismatches();
            slowestComm = Math.max(slowestComm, res.commNanos() / iters);
            slowestLoop = Math.max(slowestLoop, res.loopNanos() / iters);
        }
        RankResult first = results[0];
        System.out.printf("backend: %s, NCCL %s, world size %d, transports: %s, %,d INT32 elements per slot (%s per "
                        + "rank)%n", ExampleSupport.describe(first.backend()), first.ncclVersion(), n,
                memcpy ? "memcpy send/recv + all-gather (all-to-all: NCCL)" : "NCCL",
                slotElements, ExampleSupport.bytes(slotElements * n * Integer.BYTES));
        System.out.printf("time per iteration: %.3f ms (all-to-all + ring transactions, slowest rank); %.3f ms "
                        + "including fill and host checks; %d iteration(s), %.2f s in all with start-up%n",
                slowestComm / 1e6, slowestLoop / 1e6, first.iterations(), wallNanos / 1e9);
        if (totalMismatches == 0) {
            System.out.println("OK");
            return 0;
        }
        System.out.printf("FAILED: %,d element(s) differ from the AllToAllSchedule layout; first mismatches:%n",
                totalMismatches);
        int printed = 0;
        for (RankResult res : results) {
            for (String line : res.firstMismatches()) {
                if (printed++ < 2 * MAX_REPORTED) {
                    System.out.println("  rank " + res.rank() + ": " + line);
                }
            }
        }
        if (printed > 2 * MAX_REPORTED) {
            System.out.println("  ... (" + (printed - 2 * MAX_REPORTED) + " more listed mismatches not shown)");
        }
        return 1;
    }
}
