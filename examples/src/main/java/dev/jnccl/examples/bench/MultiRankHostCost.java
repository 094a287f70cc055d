package dev.jnccl.examples.bench;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorMode;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.UniqueId;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.io.IOException;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/**
 * Host cost of jnccl operations with one process per rank (world size W >= 1), the Java side of
 * {@code transaction_overhead.c --world W}: every process runs this program with its rank, and the
 * ranks meet through a unique-id file (rank 0 writes each communicator's id to {@code FILE.<n>} by
 * writing {@code FILE.<n>.tmp} and renaming it; the others poll for it). For each
 * {@link CommunicatorMode} chosen it times, on a fresh communicator:
 * <ul>
 *   <li>{@code transaction}: {@code comm.begin(ready).reduceScatter(t).allGather(shard, t).execute(signal)}
 *       (the C program's "transaction" case),</li>
 *   <li>{@code allreduce_ordered}: {@code comm.allReduce(t, SUM, compute)} (C: "allreduce_ordered"),</li>
 *   <li>{@code reducescatter}: {@code comm.reduceScatter(t, compute)}, the convenience operation.</li>
 * </ul>
 * As in the C program the comms stream is synchronized after every 256th operation inside the timed
 * loop, and the median over repetitions is printed, one parseable line per case:
 * {@code RESULT impl=jnccl case=transaction mode=BLOCKING_SPLIT world=2 rank=0 median_us=... enqueue_median_us=...}.
 *
 * <pre>
 * java --enable-native-access=ALL-UNNAMED -cp jnccl-benchmarks.jar dev.jnccl.examples.bench.MultiRankHostCost \
 *     --world 2 --rank 0 --id-file /tmp/id [--mode BLOCKING_SPLIT|NON_BLOCKING|both] [--iters 20000]
 *     [--reps 3] [--warmup 2000] [--count 1024] [--device 0]
 * </pre>
 * Every rank must be given the same --iters, --warmup, --reps and --count (their collectives must match).
 */
public final class MultiRankHostCost {
    private static final int SYNC_EVERY = QueueBound.SYNC_EVERY;

    private MultiRankHostCost() {}

    /**
     * A communicator for "this process is rank r of W": ranks meet only through the unique id, so
     * it has no host-side collectives (the benchmark needs none).
     */
    static final class ProcessRankCommunicator extends Communicator {
        ProcessRankCommunicator(UniqueId id, int rank, int world, int device, CommunicatorOptions options) {
            super(id, rank, world, device, options);
        }

        @Override
        protected void hostBarrier() {
            throw unsupported();
        }

        @Override
        protected List<byte[]> hostGather(byte[] local, int root) {
            throw unsupported();
        }

        @Override
        protected List<byte[]> hostAllGather(byte[] local) {
            throw unsupported();
        }

        private static UnsupportedOperationException unsupported() {
            return new UnsupportedOperationException("host barrier/gathers need a launcher (threads or MPI)");
        }
    }

    /** Rank 0 publishes {@code id} as {@code file} atomically; the others wait up to {@code seconds} for it. */
    static UniqueId exchange(Path file, int rank, int seconds) throws IOException, InterruptedException {
        if (rank == 0) {
            UniqueId id = UniqueId.generate();
            Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
            Files.write(tmp, id.bytes());
            try {
                Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING);
            }
            return id;
        }
        long deadline = System.nanoTime() + seconds * 1_000_000_000L;
        while (true) {
            try {
                byte[] bytes = Files.readAllBytes(file);
                if (bytes.length == UniqueId.BYTES) {
                    return UniqueId.fromBytes(bytes);
                }
            } catch (NoSuchFileException e) {
                // not yet written
            }
            if (System.nanoTime() > deadline) {
                throw new IOException("rank " + rank + ": no unique id in " + file + " after " + seconds + " s");
            }
            Thread.sleep(2);
        }
    }

    public static void main(String[] args) throws Exception {
        int world = 1;
        int rank = 0;
        int device = 0;
        int count = 1024;
        long iters = 20_000;
        long warmup = 2_000;
        int reps = 3;
        String idFile = null;
        String modes = "both";
        for (int i = 0; i < args.length; i++) {
            String value = i + 1 < args.length ? args[i + 1] : null;
            switch (args[i]) {
                case "--world" -> world = Integer.parseInt(value);
                case "--rank" -> rank = Integer.parseInt(value);
                case "--device" -> device = Integer.parseInt(value);
                case "--count" -> count = Integer.parseInt(value);
                case "--iters" -> iters = Long.parseLong(value);
                case "--warmup" -> warmup = Long.parseLong(value);
                case "--reps" -> reps = Integer.parseInt(value);
                case "--id-file" -> idFile = value;
                case "--mode" -> modes = value;
                default -> throw new IllegalArgumentException("unknown argument " + args[i]
                        + " (see the javadoc of MultiRankHostCost)");
            }
            i++;
        }
        if (world < 1 || rank < 0 || rank >= world || (world > 1 && idFile == null) || count % world != 0
                || iters < SYNC_EVERY || reps < 1) {
            throw new IllegalArgumentException("bad arguments: world " + world + ", rank " + rank + ", id file "
                    + idFile + ", count " + count + " (divisible by the world size), iters " + iters + " (>= "
                    + SYNC_EVERY + "), reps " + reps);
        }
        List<CommunicatorMode> chosen = modes.equals("both") ? List.of(CommunicatorMode.values())
                : List.of(CommunicatorMode.valueOf(modes));
        int sequence = 0;
        for (CommunicatorMode mode : chosen) {
            UniqueId id = idFile == null ? UniqueId.generate()
                    : exchange(Path.of(idFile + "." + sequence), rank, 120);
            Path published = idFile == null ? null : Path.of(idFile + "." + sequence);
            sequence++;
            run(id, published, rank, world, device, count, mode, iters, warmup, reps);
        }
    }

    private static void run(UniqueId id, Path published, int rank, int world, int device, int count,
                            CommunicatorMode mode, long iters, long warmup, int reps) throws IOException {
        Cuda.setDevice(device);
        CommunicatorOptions options = CommunicatorOptions.defaults().withMode(mode);
        try (Communicator comm = new ProcessRankCommunicator(id, rank, world, device, options);
             CudaStream compute = CudaStream.create(); CudaEvent ready = CudaEvent.create();
             CudaEvent signal = CudaEvent.create(); DeviceMemory memory = DeviceMemory.allocate(DType.FP32, count)) {
            if (published != null && rank == 0) {
                Files.deleteIfExists(published); // every rank has joined: the id was read
            }
            memory.fill((byte) 0, compute);
            compute.record(ready);
            compute.synchronize();
            DeviceTensor tensor = memory.tensor(DType.FP32);
            DeviceTensor shard = tensor.shard(rank, world);
            System.out.println("# jnccl rank " + rank + " of " + world + ", backend " + comm.backend() + ", NCCL "
                    + comm.ncclVersion() + ", mode " + mode + ", " + count + " x FP32");
            measure("transaction", comm, mode, iters, warmup, reps,
                    () -> comm.begin(ready).reduceScatter(tensor).allGather(shard, tensor).execute(signal));
            measure("allreduce_ordered", comm, mode, iters, warmup, reps,
                    () -> comm.allReduce(tensor, ReduceOp.SUM, compute));
            measure("reducescatter", comm, mode, iters, warmup, reps, () -> comm.reduceScatter(tensor, compute));
            compute.synchronize();
        }
    }

    private static void measure(String name, Communicator comm, CommunicatorMode mode, long iters, long warmup,
                                int reps, Runnable op) {
        CudaStream comms = comm.stream();
        long[] syncNanos = new long[1];
        Runnable timed = () -> {
            for (long i = 1; i <= iters; i++) {
                op.run();
                if ((i & (SYNC_EVERY - 1)) == 0) {
                    long start = System.nanoTime();
                    comms.synchronize();
                    syncNanos[0] += System.nanoTime() - start;
                }
            }
        };
        for (long i = 1; i <= warmup; i++) {
            op.run();
            if ((i & (SYNC_EVERY - 1)) == 0) {
                comms.synchronize();
            }
        }
        comms.synchronize();
        double[] all = new double[reps];
        double[] enqueue = new double[reps];
        List<String> samples = new ArrayList<>();
        for (int r = 0; r < reps; r++) {
            syncNanos[0] = 0;
            long start = System.nanoTime();
            timed.run();
            long elapsed = System.nanoTime() - start;
            comms.synchronize();
            all[r] = elapsed / 1000.0 / iters;
            enqueue[r] = (elapsed - syncNanos[0]) / 1000.0 / iters;
            samples.add(String.format(Locale.ROOT, "%.3f", all[r]));
        }
        System.out.printf(Locale.ROOT, "RESULT impl=jnccl case=%s mode=%s world=%d rank=%d median_us=%.3f"
                        + " enqueue_median_us=%.3f iters=%d reps=%d samples_us=%s%n", name, mode, comm.worldSize(),
                comm.rank(), median(all), median(enqueue), iters, reps, String.join(",", samples));
    }

    private static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }
}
