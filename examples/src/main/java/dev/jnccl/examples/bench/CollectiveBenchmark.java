package dev.jnccl.examples.bench;

import dev.jnccl.Communicator;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.Registration;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.examples.ExampleSupport;
import java.io.IOException;
import java.io.PrintStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * jnccl's nccl-tests compatible benchmark ({@code scripts/bench.sh OP [flags]}, {@code bin/bench}
 * in the bundle): nccl-tests' flags, output and formulas for all_reduce, reduce_scatter,
 * all_gather, sendrecv, alltoall, broadcast, reduce, gather, scatter and jnccl's uneven
 * alltoallv, run through jnccl's API (see {@link CollectiveOp}, one row per operation, for what
 * each calls and how it is checked). A program, not a test.
 *
 * <p>Per type, reduction and size, on every rank: out of place, then in place (when jnccl has
 * that form): random test data is written, {@code -w} operations run untimed and {@code -n} timed, back
 * to back, between two CUDA events recorded on the comms stream; the time per operation is
 * combined over ranks ({@code -a}, default the maximum) through a host all-gather; algbw = size /
 * time, busbw = algbw times nccl-tests' factor. Then, {@code -c} times, fresh data goes through one
 * more operation and every output element is compared with a Java reference: {@code #wrong} is the
 * sum over ranks.
 *
 * <p>The buffers come from ncclMemAlloc, as nccl-tests' do (with NCCL 2.19 or newer); {@code -R 1}
 * also registers them with every rank's communicator (ncclCommRegister) for the whole run, as
 * nccl-tests' {@code -R 1} does, so NCCL may use its zero-copy paths; they are deregistered after the
 * last rank is done.
 *
 * <p>Exit status: 0, 1 when a check found a wrong element, 2 for a bad command line, 3 when jnccl
 * failed. stdout is nccl-tests' table only; logs, errors and (on a terminal, or with
 * {@code -Djnccl.bench.progress=true}) progress go to stderr.
 */
public final class CollectiveBenchmark {
    private static final Logger LOG = LoggerFactory.getLogger(CollectiveBenchmark.class);
    /** Host staging for writing inputs and reading results, in bytes. */
    private static final long CHUNK_BYTES = 8L << 20;

    static final int EXIT_WRONG = 1;
    static final int EXIT_USAGE = 2;
    static final int EXIT_ERROR = 3;

    private CollectiveBenchmark() {}

    /**
     * Runs the benchmark and prints the nccl-tests table.
     *
     * @param args OP and the flags ({@code -h} lists them)
     */
    public static void main(String[] args) {
        System.exit(run(args, System.out, System.err));
    }

    /** Runs the benchmark with {@code args}, printing the table to {@code out}; returns the exit status. */
    static int run(String[] args, PrintStream out, PrintStream err) {
        BenchOptions options;
        try {
            options = BenchOptions.parse(args);
            // Under MPI the world is mpirun's -np, known once the communicator exists.
            if (options.launcher().equals("threads") && options.op().rooted() && options.root() >= options.ranks()) {
                throw new BenchOptions.UsageException("-r " + options.root() + " is not a rank of " + options.ranks());
            }
            // Checked before the run, not after minutes of it: a report that cannot be written loses the run.
            checkWritable("--json", options.json());
            checkWritable("--svg", options.svg());
        } catch (BenchOptions.HelpRequested e) {
            out.println(BenchOptions.usage());
            return 0;
        } catch (BenchOptions.UsageException e) {
            err.println("bench: " + e.getMessage());
            err.println(BenchOptions.usage());
            return EXIT_USAGE;
        }
        Progress progress = Progress.create(err);
        List<BenchRun> runs = new ArrayList<>();
        try {
            BenchLauncher launcher = BenchLauncher.named(options.launcher());
            for (String transport : options.transports()) {
                BenchRun[] result = new BenchRun[1];
                launcher.run(options.ranks(), transport, options.mode(),
                        comm -> new RankRunner(comm, options, transport, out, progress, result).run());
                if (result[0] != null) { // null in the MPI processes of ranks other than 0: rank 0 reports
                    runs.add(result[0]);
                }
            }
        } catch (BenchOptions.UsageException e) {
            progress.clear();
            err.println("bench: " + e.getMessage());
            return EXIT_USAGE;
        } catch (RuntimeException | Error e) {
            progress.clear();
            err.println("bench: FAILED: " + ExampleSupport.describeFailure(e));
            LOG.debug("failure", e);
            return EXIT_ERROR;
        }
        if (runs.isEmpty()) {
            return 0;
        }
        try {
            if (options.json() != null) {
                Files.writeString(Path.of(options.json()), JsonReport.write(runs, options), StandardCharsets.UTF_8);
            }
            if (options.svg() != null) {
                Files.writeString(Path.of(options.svg()), SvgPlot.render(runs, options), StandardCharsets.UTF_8);
            }
        } catch (IOException e) {
            err.println("bench: cannot write the report: " + e); // the exception's class says why (NoSuchFile, AccessDenied)
            return EXIT_ERROR;
        }
        return runs.stream().anyMatch(r -> r.errors() > 0) ? EXIT_WRONG : 0;
    }

    /** Refuses a report file that cannot be written: a missing or read-only directory, a directory as the file. */
    static void checkWritable(String flag, String file) {
        if (file == null) {
            return;
        }
        Path path = Path.of(file).toAbsolutePath();
        Path directory = path.getParent();
        String reason = null;
        if (Files.isDirectory(path)) {
            reason = "it is a directory";
        } else if (Files.exists(path) && !Files.isWritable(path)) {
            reason = "the file is not writable";
        } else if (!Files.isDirectory(directory)) {
            reason = "the directory " + directory + " does not exist (create it first)";
        } else if (!Files.isWritable(directory)) {
            reason = "the directory " + directory + " is not writable";
        }
        if (reason != null) {
            throw new BenchOptions.UsageException(flag + " " + file + ": cannot write there: " + reason);
        }
    }

    static String now() {
        return LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss", Locale.ROOT));
    }

    /** One rank's part of a run; rank 0 also reports. */
    private static final class RankRunner {
        private final Communicator comm;
        private final BenchOptions options;
        private final CollectiveOp op;
        private final String transport;
        private final PrintStream out;
        private final Progress progress;
        private final BenchRun[] result;
        private final int rank;
        private final int ranks;

        RankRunner(Communicator comm, BenchOptions options, String transport, PrintStream out, Progress progress,
                   BenchRun[] result) {
            this.comm = comm;
            this.options = options;
            this.op = options.op();
            this.transport = transport;
            this.out = out;
            this.progress = progress;
            this.result = result;
            this.rank = comm.rank();
            this.ranks = comm.worldSize();
        }

        @SuppressWarnings("try") // the registrations are held, not read, until the buffers' last use
        void run() {
            BenchRun report = null;
            List<BenchRun.Device> devices = devices();
            if (rank == 0) {
                report = new BenchRun(op.ncclTestsName(), transport, options.launcher(), comm.options().mode().name(),
                        ranks, ExampleSupport.backendName(comm.backend()), comm.ncclVersion(), devices, now());
                String version = CollectiveBenchmark.class.getPackage().getImplementationVersion();
                NcclTestsFormat.header(out, report, options, version == null ? "(development build)" : version);
            }
            long sendBytes = 16;
            long recvBytes = 16;
            for (BenchType type : options.types()) {
                CollectiveOp.Shape largest = op.shape(options.sizes().getLast(), type, ranks);
                sendBytes = Math.max(sendBytes, largest.send() * type.size());
                recvBytes = Math.max(recvBytes, Math.max(largest.send(), largest.recv()) * type.size());
            }
            List<Long> sizes = options.sizes();
            int steps = options.types().size() * options.opsToRun().size() * sizes.size();
            int step = 0;
            long started = System.nanoTime();
            try (DeviceMemory send = DeviceMemory.allocateForNccl(sendBytes);
                 DeviceMemory recv = DeviceMemory.allocateForNccl(recvBytes);
                 Registration sendRegistration = options.register() == 1 ? comm.register(send) : null;
                 Registration recvRegistration = options.register() == 1 ? comm.register(recv) : null;
                 CudaStream compute = CudaStream.create();
                 CudaEvent ready = CudaEvent.create();
                 CudaEvent start = CudaEvent.create(true);
                 CudaEvent stop = CudaEvent.create(true);
                 Arena arena = Arena.ofConfined()) {
                MemorySegment chunk = arena.allocate(Math.min(CHUNK_BYTES, recvBytes), 16);
                Buffers buffers = new Buffers(send, recv, compute, ready, start, stop, chunk);
                for (BenchType type : options.types()) {
                    for (ReduceOp reduction : options.opsToRun()) {
                        for (int s = 0; s < sizes.size(); s++) {
                            CollectiveOp.Shape shape = op.shape(sizes.get(s), type, ranks);
                            if (rank == 0) {
                                // The reduction is named only for operations that reduce (all_gather has none).
                                String what = op.redopColumn()
                                        ? type.ncclTestsName() + " " + BenchOptions.opName(reduction) : type.ncclTestsName();
                                progress.show(String.format(Locale.ROOT, "bench %s [%s, %s]: %s (%d/%d), %.1f s",
                                        op.ncclTestsName(), transport, what,
                                        ExampleSupport.bytes(shape.sizeBytes(type)), ++step, steps,
                                        (System.nanoTime() - started) / 1e9));
                            }
                            long seed = 0x5EEDL + 1_000_003L * s + 7919L * type.ordinal() + 104_729L * reduction.kind().ordinal();
                            BenchRun.Measurement outOfPlace = measure(buffers, shape, type, reduction, false, seed);
                            BenchRun.Measurement inPlace = op.inPlace()
                                    ? measure(buffers, shape, type, reduction, true, seed + 17) : null;
                            if (report != null) {
                                BenchRun.Row row = new BenchRun.Row(shape.sizeBytes(type), shape.count(),
                                        type.ncclTestsName(), op.redopColumn() ? BenchOptions.opName(reduction) : "none",
                                        op.rooted() ? options.root() : -1, outOfPlace, inPlace);
                                report.rows.add(row);
                                progress.clear();
                                out.println(NcclTestsFormat.row(row));
                                out.flush();
                            }
                        }
                    }
                }
                comm.synchronize();
                comm.barrier(); // peers may read this rank's buffers until every rank is done
            }
            if (report != null) {
                progress.clear();
                report.endTime = now();
                NcclTestsFormat.footer(out, report);
                result[0] = report;
            }
        }

        /** Every rank's line of "# Using devices", through a host all-gather. */
        private List<BenchRun.Device> devices() {
            String mine = ProcessHandle.current().pid() + "\t" + hostName() + "\t" + comm.device() + "\tNCCL "
                    + comm.ncclVersion();
            List<BenchRun.Device> devices = new ArrayList<>();
            List<byte[]> all = comm.allGatherBytesHost(mine.getBytes(StandardCharsets.UTF_8));
            for (int r = 0; r < all.size(); r++) {
                String[] f = new String(all.get(r), StandardCharsets.UTF_8).split("\t", 4);
                devices.add(new BenchRun.Device(r, Integer.parseInt(f[0]), f[1], Integer.parseInt(f[2]), f[3]));
            }
            return devices;
        }

        private record Buffers(DeviceMemory send, DeviceMemory recv, CudaStream compute, CudaEvent ready,
                               CudaEvent start, CudaEvent stop, MemorySegment chunk) {}

        private BenchRun.Measurement measure(Buffers b, CollectiveOp.Shape shape, BenchType type, ReduceOp reduction,
                                             boolean inPlace, long seed) {
            CollectiveOp.Call call = new CollectiveOp.Call(comm,
                    new DeviceTensor(b.send().address(), type.dtype(), b.send().bytes() / type.size()),
                    new DeviceTensor(b.recv().address(), type.dtype(), b.recv().bytes() / type.size()),
                    shape, type, reduction, options.root(), inPlace, b.compute(), b.ready());
            if (options.checks() > 0) {
                writeInputs(b, call, seed);
            } else {
                comm.barrier();
                b.compute().record(b.ready());
            }
            for (int i = 0; i < options.warmup(); i++) {
                op.enqueue(call);
            }
            double micros = options.graphLaunches() > 0 ? timeGraph(b, call) : timeOneByOne(b, call);
            double time = combine(comm.allGatherLongsHost(Double.doubleToLongBits(micros)));
            double algBw = shape.sizeBytes(type) / 1e3 / time; // bytes per microsecond / 1000 = GB/s
            double busBw = algBw * op.busFactor(ranks);
            long wrong = -1;
            if (options.checks() > 0 && (!inPlace || op.checksInPlace())) {
                wrong = 0;
                for (int c = 0; c < options.checks() && wrong == 0; c++) {
                    long checkSeed = seed + 1_000_000_007L * (c + 1);
                    writeInputs(b, call, checkSeed);
                    op.enqueue(call);
                    comm.synchronize();
                    long mine = countWrong(b, call, checkSeed);
                    for (long w : comm.allGatherLongsHost(mine)) {
                        wrong += w;
                    }
                }
            }
            return new BenchRun.Measurement(time, algBw, busBw, wrong);
        }

        /** Microseconds per operation, the {@code -n} operations enqueued one by one. */
        private double timeOneByOne(Buffers b, CollectiveOp.Call call) {
            b.start().record(comm.stream());
            for (int i = 0; i < options.iterations(); i++) {
                op.enqueue(call);
            }
            b.stop().record(comm.stream());
            comm.await(b.stop());
            return b.stop().elapsedMillis(b.start()) * 1000.0 / options.iterations();
        }

        /**
         * Microseconds per operation with {@code -G}: the {@code -n} operations captured once on the
         * compute stream (the ready event recorded there forks the comms stream into the capture,
         * waitOnComms joins it back), one untimed launch, then {@code -G} launches timed on the
         * compute stream, as nccl-tests' {@code -G} does.
         */
        private double timeGraph(Buffers b, CollectiveOp.Call call) {
            CudaStream compute = b.compute();
            try (CudaGraph graph = CudaGraph.capture(compute, () -> {
                compute.record(b.ready());
                for (int i = 0; i < options.iterations(); i++) {
                    op.enqueue(call);
                }
                comm.waitOnComms(compute);
            })) {
                comm.launch(graph, compute);
                b.start().record(compute);
                for (int i = 0; i < options.graphLaunches(); i++) {
                    comm.launch(graph, compute);
                }
                b.stop().record(compute);
                comm.await(b.stop());
            }
            return b.stop().elapsedMillis(b.start()) * 1000.0 / ((double) options.iterations() * options.graphLaunches());
        }

        /** The ranks' times combined as {@code -a} says. */
        private double combine(long[] bits) {
            double[] times = new double[bits.length];
            for (int i = 0; i < bits.length; i++) {
                times[i] = Double.longBitsToDouble(bits[i]);
            }
            return switch (options.average()) {
                case 0 -> times[0];
                case 1 -> java.util.Arrays.stream(times).average().orElse(0);
                case 2 -> java.util.Arrays.stream(times).min().orElse(0);
                default -> java.util.Arrays.stream(times).max().orElse(0);
            };
        }

        /** Clears the output, writes this rank's input test data, records the ready event. */
        private void writeInputs(Buffers b, CollectiveOp.Call call, long seed) {
            comm.barrier(); // every rank is done with the previous operation (peers may read this rank's buffers)
            CollectiveOp.Shape shape = call.shape();
            BenchType type = call.type();
            int size = type.size();
            long outputBytes = Math.max(shape.send(), shape.recv()) * size;
            if (outputBytes > 0) {
                DeviceMemory.wrap(b.recv().address(), outputBytes, comm.device()).fill((byte) 0, b.compute());
                b.compute().synchronize(); // the copies below are synchronous host copies, not on this stream
            }
            if (op.hasInput(rank, call.root())) {
                DeviceMemory target = call.inPlace() ? b.recv() : b.send();
                long first = op.inputOffset(shape, rank, call.inPlace());
                long perChunk = b.chunk().byteSize() / size;
                for (long done = 0; done < shape.send(); done += perChunk) {
                    long n = Math.min(perChunk, shape.send() - done);
                    MemorySegment part = b.chunk().asSlice(0, n * size);
                    for (long k = 0; k < n; k++) {
                        long j = done + k;
                        if (op.reduces()) {
                            type.putValue(part, k, type.reductionValue(seed, rank, j, call.op(), ranks));
                        } else {
                            type.putBits(part, k, BenchType.rawBits(seed, rank, j));
                        }
                    }
                    target.copyFromHost(part, (first + done) * size);
                }
            }
            b.compute().record(b.ready());
        }

        /** Compares every checked output element of this rank with the reference; returns the mismatches. */
        private long countWrong(Buffers b, CollectiveOp.Call call, long seed) {
            CollectiveOp.Shape shape = call.shape();
            BenchType type = call.type();
            int size = type.size();
            long count = op.checkedCount(shape, rank, ranks, call.root());
            long first = op.outputOffset(shape, rank, call.inPlace());
            long perChunk = b.chunk().byteSize() / size;
            long wrong = 0;
            for (long done = 0; done < count; done += perChunk) {
                long n = Math.min(perChunk, count - done);
                MemorySegment part = b.chunk().asSlice(0, n * size);
                b.recv().copyToHost(part, (first + done) * size);
                for (long k = 0; k < n; k++) {
                    long i = done + k;
                    int source = op.sourceRank(shape, rank, ranks, call.root(), i);
                    long j = op.sourceIndex(shape, rank, ranks, i);
                    boolean ok = source == CollectiveOp.ALL_RANKS
                            ? Reference.reductionMatches(type, call.op(), seed, ranks, j, part, k)
                            : type.getBits(part, k) == type.truncateBits(BenchType.rawBits(seed, source, j));
                    if (!ok) {
                        if (wrong == 0) {
                            LOG.warn("{} {} {}: rank {} output element {} is wrong (first of this check)", op.ncclTestsName(),
                                    type.ncclTestsName(), call.inPlace() ? "in place" : "out of place", rank, i);
                        }
                        wrong++;
                    }
                }
            }
            return wrong;
        }
    }

    private static String hostName() {
        try {
            return Files.readString(Path.of("/proc/sys/kernel/hostname")).trim();
        } catch (IOException | RuntimeException e) {
            String env = System.getenv("HOSTNAME");
            return env != null ? env : "localhost";
        }
    }
}
