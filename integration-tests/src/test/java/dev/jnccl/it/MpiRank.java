package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.mpi.MpiCommunicators;
import dev.jnccl.mpi.MpiException;
import dev.jnccl.mpi.MpiOptions;
import dev.jnccl.mpi.internal.JvmSignalHandlers;
import dev.jnccl.mpi.internal.MpiLibrary;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * One rank of an MPI job (main class started by {@code mpirun -np W java ... MpiRank SCENARIO SEED}
 * from {@link MpiWorldsTest} and scripts/gpu/gpu-mpi-test.sh). Every rank prints one verdict line
 * {@code VERDICT rank=R world=W PASS|FAIL ...} that the JUnit side parses. Scenarios:
 * <ul>
 *   <li>{@code ops}: through {@link MpiCommunicators#run}: every transaction command, convenience
 *       operation, data type, the host gathers and barrier ({@link Scenarios}); the device is the
 *       node-local rank (or {@code JNCCL_DEVICE} when the launcher sets it); the unique id
 *       broadcast checked by gathering every rank's view of it;</li>
 *   <li>{@code device-override}: {@link MpiOptions#withDevice} 0 on every rank, a ring exchange;</li>
 *   <li>{@code error-string}: an MPI_Bcast with an invalid root must throw {@link MpiException}
 *       with MPI's text, the function and the rank;</li>
 *   <li>{@code host-init}: the program initialises MPI itself (MPI_THREAD_MULTIPLE), then creates and
 *       closes a communicator; MPI must still be usable (a barrier), then the program finalizes;</li>
 *   <li>{@code throw}: rank 1 (or 0 at world 1) throws in the middle of a transaction inside
 *       {@link MpiCommunicators#run}; the job must end non-zero (prints {@code PID} first);</li>
 *   <li>{@code killed}: transactions in a loop (watchdog 3 s); the last rank prints {@code RUNNING}
 *       and is SIGKILLed by the test; the job must end, bounded;</li>
 *   <li>{@code watchdog}: the same loop while the host emulation makes rank 1 hang
 *       ({@code JNCCL_HOST_FAULT=hang}): a watchdog aborts, and its thread ends the job with MPI_Abort.</li>
 * </ul>
 */
public final class MpiRank {
    private MpiRank() {}

    public static void main(String[] args) {
        String scenario = args[0];
        long seed = Long.parseLong(args[1]);
        System.out.println("PID " + ProcessHandle.current().pid());
        System.out.flush();
        try {
            switch (scenario) {
                case "ops" -> ops(seed);
                case "device-override" -> deviceOverride(seed);
                case "error-string" -> errorString();
                case "host-init" -> hostInit(seed);
                case "ucx-signals" -> ucxSignals(seed);
                case "throw" -> throwMidTransaction();
                case "throw-create" -> throwMidTransactionWithCreate();
                case "late-close" -> lateClose(seed);
                case "killed", "watchdog" -> loopTransactions();
                default -> throw new IllegalArgumentException("unknown scenario " + scenario);
            }
        } catch (Throwable e) {
            System.out.println("VERDICT rank=? world=? FAIL " + e.toString().replace('\n', ' '));
            e.printStackTrace(System.out);
            System.out.flush();
            Runtime.getRuntime().halt(2);
        }
        System.out.flush();
    }

    private static void verdict(Communicator comm, String details) {
        // Every scenario: after MPI_Init the JVM must still own the signals it faults on purpose
        // (UCX takes them from its constructor unless told not to; see JvmSignalHandlers).
        List<JvmSignalHandlers.Foreign> foreign = JvmSignalHandlers.foreignHandlers();
        assertTrue(foreign.isEmpty(), "rank " + comm.rank() + ": the JVM's signal handlers were replaced: " + foreign);
        System.out.println("VERDICT rank=" + comm.rank() + " world=" + comm.worldSize() + " PASS device="
                + comm.device() + " backend=" + comm.backend() + " abi=" + MpiLibrary.load().abi().name() + " "
                + details);
        System.out.flush();
    }

    private static void ops(long seed) {
        MpiCommunicators.run(MpiOptions.defaults(), comm -> {
            // The device: JNCCL_DEVICE when the launcher sets it (one GPU for all ranks), else the
            // node-local rank, which on this one node is the world rank.
            String override = System.getenv(MpiCommunicators.DEVICE_ENVIRONMENT);
            int expected = override != null ? Integer.parseInt(override) : comm.rank();
            assertEquals(expected, comm.device(), "device of rank " + comm.rank());
            try (RankContext c = new RankContext(comm, seed)) {
                Scenarios.transactionCommands(c);
                Scenarios.mixedTransaction(c);
                Scenarios.sendOnly(c);
                Scenarios.convenienceOperations(c);
                Scenarios.everyDataType(c);
                Scenarios.hostHelpers(c);
                Scenarios.overlapWithCompute(c, c.newStream());
                OpsScenarios.broadcastFromEveryRoot(c);
                OpsScenarios.sendAndReceiveToItselfAloneAndInRings(c);
                OpsScenarios.allToAllOfEveryDtype(c);
                OpsScenarios.splitIntoGroups(c);
                BufferScenarios.scaledSums(c);
                BufferScenarios.registeredNcclMemory(c);
            }
            verdict(comm, "scenarios=all");
        });
    }

    private static void deviceOverride(long seed) {
        MpiCommunicators.run(MpiOptions.defaults().withDevice(0), comm -> {
            assertEquals(0, comm.device(), "device of rank " + comm.rank() + " with withDevice(0)");
            try (RankContext c = new RankContext(comm, seed)) {
                Scenarios.reduceScatters(c);
                Scenarios.hostHelpers(c);
            }
            verdict(comm, "override=0");
        });
    }

    private static void errorString() {
        MpiCommunicators.run(MpiOptions.defaults(), comm -> {
            MpiLibrary mpi = MpiLibrary.load();
            MpiLibrary.Handle handle = mpi.dup(mpi.world());
            mpi.setErrorsReturn(handle);
            int invalidRoot = comm.worldSize() + 3;
            try {
                mpi.bcast(new byte[8], invalidRoot, handle);
                fail("MPI_Bcast with root " + invalidRoot + " of " + comm.worldSize() + " did not fail");
            } catch (MpiException e) {
                assertEquals("MPI_Bcast", e.function(), e.getMessage());
                assertEquals(comm.rank(), e.rank(), e.getMessage());
                assertTrue(e.errorCode() != 0, e.getMessage());
                String text = mpi.errorString(e.errorCode());
                assertFalse(text.isBlank(), "MPI_Error_string of " + e.errorCode());
                assertTrue(e.getMessage().contains(text), e.getMessage() + " lacks MPI's text " + text);
                assertTrue(e.getMessage().toLowerCase(java.util.Locale.ROOT).contains("root"), e.getMessage());
                System.out.println("MPI_ERROR " + e.getMessage().replace('\n', ' '));
            }
            mpi.free(handle);
            comm.barrier();
            verdict(comm, "error-string=ok");
        });
    }

    private static void hostInit(long seed) {
        MpiLibrary mpi = MpiLibrary.load();
        int provided = mpi.initThread(MpiLibrary.THREAD_MULTIPLE);
        assertEquals(MpiLibrary.THREAD_MULTIPLE, provided, "thread level");
        Communicator comm = MpiCommunicators.create();
        try (RankContext c = new RankContext(comm, seed)) {
            Scenarios.reduceScatters(c);
            Scenarios.hostHelpers(c);
        }
        comm.close();
        assertTrue(mpi.initialized() && !mpi.finalized(), "MPI still initialised after close");
        MpiLibrary.Handle handle = mpi.dup(mpi.world());
        mpi.setErrorsReturn(handle);
        MpiLibrary.Wait wait = new MpiLibrary.Wait("test", TimeUnit.SECONDS.toNanos(60), () -> null);
        mpi.barrier(handle, wait);
        List<byte[]> all = mpi.allGather(new byte[] {(byte) comm.rank()}, handle, wait);
        for (int r = 0; r < all.size(); r++) {
            assertArrayEquals(new byte[] {(byte) r}, all.get(r), "MPI all-gather after close, rank " + r);
        }
        mpi.free(handle);
        verdict(comm, "host-init=ok");
        mpi.finalizeMpi();
    }

    /**
     * Run with {@code UCX_ERROR_SIGNALS} naming the JVM's signals, so UCX (where MPI loads it) takes
     * them: jnccl must hand them back at create, and the JVM must survive many safepoints after that.
     */
    private static void ucxSignals(long seed) {
        MpiCommunicators.run(MpiOptions.defaults(), comm -> {
            try (RankContext c = new RankContext(comm, seed)) {
                Scenarios.reduceScatters(c);
            }
            // Safepoints while compiled code runs: each one a SIGSEGV the JVM takes on purpose.
            long sum = 0;
            for (int i = 0; i < 200; i++) {
                System.gc();
                sum += Thread.getAllStackTraces().size();
            }
            assertTrue(sum > 0, "threads seen");
            comm.barrier();
            verdict(comm, "ucx-signals=jvm");
        });
    }

    private static void throwMidTransaction() {
        MpiCommunicators.run(MpiOptions.defaults(), MpiRank::failMidTransaction);
    }

    /** Rank 1 (or 0 alone) throws between adding a transaction's commands and executing it; the others wait in it. */
    private static void failMidTransaction(Communicator comm) {
        int victim = comm.worldSize() > 1 ? 1 : 0;
        try (CudaStream stream = CudaStream.create(); CudaEvent signal = CudaEvent.create();
             DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 840L * comm.worldSize())) {
            memory.fill((byte) 0, stream);
            DeviceTensor tensor = memory.tensor(DType.FP32);
            comm.barrier();
            System.out.println("STARTED");
            System.out.flush();
            try (Transaction tx = comm.begin(stream)) {
                tx.reduceScatter(tensor).allGather(tensor.shard(comm.rank(), comm.worldSize()), tensor);
                if (comm.rank() == victim) {
                    throw new IllegalStateException("rank " + victim + " fails on purpose mid-transaction");
                }
                tx.execute(signal);
            }
            comm.await(signal);
            comm.barrier(); // the victim never gets here: the job must end this wait
        }
        System.out.println("UNEXPECTED: rank " + comm.rank() + " finished");
    }

    /**
     * As {@link #throwMidTransaction} with the user's own try-with-resources instead of
     * {@code run}: jnccl never sees the exception, only the victim's close. Its peers wait in the
     * transaction the victim never executed; the job must still end within seconds.
     */
    private static void throwMidTransactionWithCreate() {
        try (Communicator comm = MpiCommunicators.create()) {
            failMidTransaction(comm);
        }
    }

    /**
     * Every rank checks an all-reduce; rank 0 then reaches close 20 s after the others (well within
     * the close timeout): a healthy late rank must close cleanly, and so must the others.
     */
    private static void lateClose(long seed) {
        int rank;
        try (Communicator comm = MpiCommunicators.create()) {
            rank = comm.rank();
            try (RankContext c = new RankContext(comm, seed)) {
                Scenarios.reduceScatters(c);
            }
            if (rank == 0) {
                try {
                    Thread.sleep(LATE_CLOSE_MILLIS);
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            }
            verdict(comm, "late-close=" + (rank == 0 ? LATE_CLOSE_MILLIS : 0) + "ms");
        }
        System.out.println("CLOSED rank=" + rank);
        System.out.flush();
    }

    /** How late rank 0 closes in {@link #lateClose}. */
    static final long LATE_CLOSE_MILLIS = 20_000;

    private static void loopTransactions() {
        CommunicatorOptions options = CommunicatorOptions.defaults().withWatchdog(Duration.ofSeconds(3))
                .withWatchdogInterval(Duration.ofMillis(50)).withCloseTimeout(Duration.ofSeconds(5));
        MpiCommunicators.run(MpiOptions.defaults().withCommunicator(options), comm -> {
            try (CudaStream stream = CudaStream.create(); CudaEvent signal = CudaEvent.create();
                 DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 840L * comm.worldSize())) {
                memory.fill((byte) 0, stream);
                DeviceTensor tensor = memory.tensor(DType.FP32);
                for (long i = 0; i < 10_000_000; i++) {
                    try (Transaction tx = comm.begin(stream)) {
                        tx.reduceScatter(tensor).allGather(tensor.shard(comm.rank(), comm.worldSize()), tensor);
                        tx.execute(signal);
                    }
                    comm.await(signal);
                    if (i == 20) {
                        System.out.println("RUNNING rank=" + comm.rank() + " pid=" + ProcessHandle.current().pid());
                        System.out.flush();
                    }
                }
            }
            System.out.println("UNEXPECTED: rank " + comm.rank() + " finished");
        });
    }
}
