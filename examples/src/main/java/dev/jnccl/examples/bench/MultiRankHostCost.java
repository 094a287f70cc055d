package dev.jnccl.examples.bench;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorMode;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.UniqueId;
import dev.jnccl.cuda.Cuda;
import java.io.IOException;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;

/**
 * Host cost of jnccl operations with one process per rank (world size W >= 1), the Java side of
 * {@code transaction_overhead.c --world W}: every process runs this program with its rank, and the
 * ranks meet through a unique-id file (rank 0 writes each communicator's id to {@code FILE.<n>} by
 * writing {@code FILE.<n>.tmp} and renaming it; the others poll for it). For each
 * {@link CommunicatorMode} chosen it times, on a fresh communicator:
 * <ul>
 *   <li>{@code transaction}: {@code comm.begin(ready).reduceScatter(t).allGather(shard, t).execute(signal)}
 *       (the C program's "transaction" case),</li>
 *   <li>{@code all_reduce_ordered}: {@code comm.allReduce(t, SUM, compute)} (C: "all_reduce_ordered"),</li>
 *   <li>{@code reduce_scatter}: {@code comm.reduceScatter(t, compute)}, the convenience operation;</li>
 *   <li>the other convenience operations, each beside the C case of the same name, which makes
 *       the same native calls: {@code reduce_scatter_ordered} ({@code comm.reduceScatter(t, compute)}
 *       again, under the C case's name), {@code broadcast_ordered} ({@code comm.broadcast(t, 0, compute)}),
 *       {@code all_to_all_ordered} ({@code comm.allToAll(t, recv, compute)}, {@code recv} as large as
 *       {@code t}), {@code reduce_mean_ordered} ({@code comm.reduceMean(t, compute)}),
 *       {@code reduce_max_ordered} ({@code comm.reduceMax(t, compute)}) and
 *       {@code reduce_norm_squared_ordered} ({@code comm.reduceNormSquared(v, compute)}, {@code v}
 *       the first element of {@code t}).</li>
 * </ul>
 * As in the C program the comms stream is synchronized after every 256th operation inside the timed
 * loop, and the median and the best of the repetitions are printed, one parseable line per case
 * ({@link RankHostCost}):
 * {@code RESULT impl=jnccl case=transaction mode=BLOCKING_SPLIT launch=process world=2 rank=0 median_us=...}.
 *
 * <pre>
 * java --enable-native-access=ALL-UNNAMED -cp jnccl-benchmarks.jar dev.jnccl.examples.bench.MultiRankHostCost \
 *     --world 2 --rank 0 --id-file /tmp/id [--mode BLOCKING_SPLIT|NON_BLOCKING|both] [--iters 20000]
 *     [--reps 3] [--warmup 2000] [--warmup-ms 2000] [--count 1024] [--device 0]
 *     [--cases transaction,all_reduce_ordered,reduce_scatter,...]
 * </pre>
 * (--cases: default every case above.)
 * Every rank must be given the same --iters, --warmup, --warmup-ms, --reps and --count (their collectives must match).
 * The watchdog is on, as by default for users; {@code -Djnccl.bench.watchdog=off} turns it off.
 */
public final class MultiRankHostCost {
    /**
     * {@code -Djnccl.bench.watchdog=off} measures without the watchdog (on by default, as for users):
     * the two runs side by side give the watchdog's share of the host cost.
     */
    private static final boolean WATCHDOG = !"off".equals(System.getProperty("jnccl.bench.watchdog", "on"));

    private MultiRankHostCost() {}

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

    /**
     * Runs the chosen modes' cases as the rank given on the command line (see the class comment).
     *
     * @param args the options of the class comment
     * @throws Exception when the unique id cannot be exchanged, or a measurement fails
     */
    public static void main(String[] args) throws Exception {
        RankHostCost.Settings settings = RankHostCost.Settings.parse(args, false, "MultiRankHostCost");
        int rank = settings.rank();
        String idFile = settings.idFile();
        int sequence = 0;
        for (CommunicatorMode mode : settings.modes()) {
            Path published = idFile == null ? null : Path.of(idFile + "." + sequence);
            UniqueId id = published == null ? UniqueId.generate() : exchange(published, rank, 120);
            sequence++;
            Cuda.setDevice(settings.device());
            CommunicatorOptions options = CommunicatorOptions.defaults().withMode(mode);
            if (!WATCHDOG) {
                options = options.withoutWatchdog();
            }
            try (Communicator comm = Communicator.initRank(id, rank, settings.world(), settings.device(), options)) {
                if (published != null && rank == 0) {
                    Files.deleteIfExists(published); // every rank has joined: the id was read
                }
                // No host barrier between processes: the ranks' collectives keep them in step.
                RankHostCost.measureAll(comm, mode, settings, "process", () -> { });
            }
        }
    }
}
