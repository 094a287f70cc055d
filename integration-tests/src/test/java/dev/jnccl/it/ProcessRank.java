package dev.jnccl.it;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorMode;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.NcclException;
import dev.jnccl.Transaction;
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
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * One rank of a world of processes (main class of the child JVMs of {@link MultiProcessLifecycleTest}):
 * ranks meet only through a unique-id file that rank 0 writes ({@code FILE.<n>} per communicator,
 * written to a temporary name and renamed). Arguments: scenario, id file, world, rank, device, seed,
 * modes (comma-separated {@link CommunicatorMode} names). Scenarios:
 * <ul>
 *   <li>{@code ops}: per mode, every transaction command and convenience operation of
 *       {@link Scenarios} checked element by element, then a timed close: prints
 *       {@code OK mode=M close_ms=T};</li>
 *   <li>{@code never-joined}: started for ranks 0..W-2 only; per mode, init must end with
 *       {@link CommunicatorAbortedException} at the 2 s deadline: prints {@code INIT_ABORTED mode=M ms=T};</li>
 *   <li>{@code killed}: transactions in a loop with the watchdog on (3 s); rank W-1 prints
 *       {@code RUNNING} and is SIGKILLed by the test; the others print {@code ABORTED epoch_ms=E reason=...}
 *       once their communicator is aborted (by the watchdog, or by the enqueue that met the dead
 *       peer), then {@code CLOSED close_ms=T}.</li>
 * </ul>
 * Exit code 0: as expected; 1: a wrong result or outcome; 2: an unexpected error.
 */
public final class ProcessRank {
    static final Duration INIT_TIMEOUT_NEVER_JOINED = Duration.ofSeconds(2);
    /** ncclRemoteError: a peer closed its connection (here: it gave up its init at the deadline). */
    private static final int NCCL_REMOTE_ERROR = 6;
    static final Duration WATCHDOG_TIMEOUT = Duration.ofSeconds(3);
    static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(5);

    private ProcessRank() {}

    public static void main(String[] args) {
        try {
            String scenario = args[0];
            Path idFile = Path.of(args[1]);
            int world = Integer.parseInt(args[2]);
            int rank = Integer.parseInt(args[3]);
            int device = Integer.parseInt(args[4]);
            long seed = Long.parseLong(args[5]);
            List<CommunicatorMode> modes = new ArrayList<>();
            for (String mode : args[6].split(",")) {
                modes.add(CommunicatorMode.valueOf(mode));
            }
            Cuda.setDevice(device);
            boolean ok = switch (scenario) {
                case "ops" -> ops(idFile, world, rank, device, seed, modes);
                case "never-joined" -> neverJoined(idFile, world, rank, device, modes);
                case "killed" -> killed(idFile, world, rank, device, modes.getFirst());
                default -> throw new IllegalArgumentException("unknown scenario " + scenario);
            };
            System.out.flush();
            Runtime.getRuntime().halt(ok ? 0 : 1);
        } catch (AssertionError e) {
            e.printStackTrace(System.out);
            System.out.flush();
            Runtime.getRuntime().halt(1);
        } catch (Throwable e) {
            e.printStackTrace(System.out);
            System.out.flush();
            Runtime.getRuntime().halt(2);
        }
    }

    private static boolean ops(Path idFile, int world, int rank, int device, long seed, List<CommunicatorMode> modes)
            throws Exception {
        for (int i = 0; i < modes.size(); i++) {
            CommunicatorMode mode = modes.get(i);
            UniqueId id = exchange(idFile, i, rank);
            Communicator comm = Communicator.initRank(id, rank, world, device, CommunicatorOptions.defaults().withMode(mode)
                    .withCloseTimeout(CLOSE_TIMEOUT));
            forget(idFile, i, rank);
            try (RankContext c = new RankContext(comm, seed + i)) {
                Scenarios.transactionCommands(c);
                Scenarios.mixedTransaction(c);
                Scenarios.sendOnly(c);
                Scenarios.convenienceOperations(c);
            }
            long started = System.nanoTime();
            comm.close();
            System.out.println("OK mode=" + mode + " close_ms=" + millisSince(started));
        }
        return true;
    }

    private static boolean neverJoined(Path idFile, int world, int rank, int device, List<CommunicatorMode> modes)
            throws Exception {
        boolean ok = true;
        for (int i = 0; i < modes.size(); i++) {
            CommunicatorMode mode = modes.get(i);
            UniqueId id = exchange(idFile, i, rank);
            long started = System.nanoTime();
            try (Communicator comm = Communicator.initRank(id, rank, world, device, CommunicatorOptions.defaults().withMode(mode)
                    .withInitTimeout(INIT_TIMEOUT_NEVER_JOINED))) {
                System.out.println("UNEXPECTED: init of " + comm + " succeeded without rank " + (world - 1));
                ok = false;
            } catch (CommunicatorAbortedException e) {
                System.out.println("INIT_ABORTED mode=" + mode + " ms=" + millisSince(started) + " reason="
                        + e.getMessage().replace('\n', ' '));
            } catch (NcclException e) {
                // Real NCCL (seen on the H200, 2.28.3): when the bootstrap root (rank 0) reaches its
                // deadline first and aborts, the others' init fails at once with ncclRemoteError
                // ("Connection closed by remote peer") instead of reaching their own deadline.
                if (e.result() != NCCL_REMOTE_ERROR) {
                    throw e;
                }
                System.out.println("INIT_PEER_GAVE_UP mode=" + mode + " ms=" + millisSince(started) + " reason="
                        + e.getMessage().replace('\n', ' '));
            }
            // The id file stays: after a failed init other ranks may not have read it yet (the test
            // deletes the directory).
        }
        return ok;
    }

    private static boolean killed(Path idFile, int world, int rank, int device, CommunicatorMode mode)
            throws Exception {
        UniqueId id = exchange(idFile, 0, rank);
        CommunicatorOptions options = CommunicatorOptions.defaults().withMode(mode).withWatchdog(WATCHDOG_TIMEOUT)
                .withWatchdogInterval(Duration.ofMillis(50)).withCloseTimeout(CLOSE_TIMEOUT);
        Communicator comm = Communicator.initRank(id, rank, world, device, options);
        forget(idFile, 0, rank);
        try (CudaStream stream = CudaStream.create(); CudaEvent signal = CudaEvent.create();
             DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 840L * world)) {
            memory.fill((byte) 0, stream);
            DeviceTensor tensor = memory.tensor(DType.FP32);
            DeviceTensor shard = tensor.shard(rank, world);
            long deadline = System.nanoTime() + Duration.ofSeconds(120).toNanos();
            for (long i = 0; System.nanoTime() < deadline; i++) {
                try (Transaction tx = comm.begin(stream)) {
                    tx.reduceScatter(tensor).allGather(shard, tensor);
                    tx.execute(signal);
                } catch (CommunicatorAbortedException | NcclException e) {
                    // The host emulation notices a dead peer already when work is enqueued: the
                    // failed enqueue aborts the communicator (real NCCL: usually the watchdog does).
                    if (!comm.isAborted()) {
                        throw e;
                    }
                    return aborted(comm, comm.abortReason());
                }
                // Wait on the event, not through the communicator: only the watchdog may end this.
                while (!signal.isComplete()) {
                    if (comm.isAborted()) {
                        return aborted(comm, comm.abortReason());
                    }
                    Thread.sleep(1);
                }
                if (i == 20) {
                    System.out.println("RUNNING");
                    System.out.flush();
                }
            }
            System.out.println("UNEXPECTED: no abort within 120 s");
            return false;
        }
    }

    private static boolean aborted(Communicator comm, String reason) {
        System.out.println("ABORTED epoch_ms=" + System.currentTimeMillis() + " reason=" + reason.replace('\n', ' '));
        long started = System.nanoTime();
        comm.close();
        System.out.println("CLOSED close_ms=" + millisSince(started));
        return true;
    }

    private static long millisSince(long started) {
        return Duration.ofNanos(System.nanoTime() - started).toMillis();
    }

    /** Rank 0 makes communicator {@code n}'s id (NCCL's bootstrap listener lives in its process). */
    static UniqueId exchange(Path idFile, int n, int rank) throws IOException, InterruptedException {
        Path file = Path.of(idFile + "." + n);
        if (rank == 0) {
            UniqueId id = UniqueId.generate();
            Path tmp = Path.of(file + ".tmp");
            Files.write(tmp, id.bytes());
            try {
                Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING);
            }
            return id;
        }
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        while (System.nanoTime() < deadline) {
            try {
                byte[] bytes = Files.readAllBytes(file);
                if (bytes.length == UniqueId.BYTES) {
                    return UniqueId.fromBytes(bytes);
                }
            } catch (NoSuchFileException e) {
                // not written yet
            }
            Thread.sleep(5);
        }
        throw new IOException("rank " + rank + ": no unique id in " + file + " after 60 s");
    }

    /** Rank 0 removes the id file once init is over (every rank has read it by then). */
    private static void forget(Path idFile, int n, int rank) throws IOException {
        if (rank == 0) {
            Files.deleteIfExists(Path.of(idFile + "." + n));
        }
    }
}
