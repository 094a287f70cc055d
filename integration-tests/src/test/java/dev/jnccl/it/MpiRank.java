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
import dev.jnccl.ReduceOp;
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
 *       ({@code JNCCL_HOST_FAULT=hang}): a watchdog aborts, and its thread ends the job with MPI_Abort;</li>
 *   <li>{@code absent-barrier}, {@code absent-allgather}: after a first barrier of all, the last rank
 *       never comes to the next barrier / allGatherBytesHost (it sleeps; watchdog 3 s): the others'
 *       wait ends at the deadline naming it, and the job ends (prints {@code WAITING} first);</li>
 *   <li>{@code late-create}: the last rank calls create {@value #LATE_CREATE_MILLIS} ms late (init
 *       timeout {@value #LATE_CREATE_INIT_TIMEOUT_MILLIS} ms): the others' create ends at its deadline
 *       naming it, and the job ends;</li>
 *   <li>{@code interrupted-arrival}: on jnccl's MPI layer directly, rank 0's rendezvous is interrupted
 *       while the others stay away: the exception names them, carries the interrupt, keeps the
 *       interrupt status; the abandoned requests harm nothing (a later rendezvous works, the others
 *       still receive rank 0's abandoned message).</li>
 *   <li>{@code mismatch}: rank 1 all-reduces 4095 elements, the others 4096 (random data); the job
 *       runs with the consistency check on ({@code JNCCL_DEBUG=detail}), which must end it before
 *       NCCL runs the all-reduce.</li>
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
                case "throw-hang-abort" -> throwWithShortClose();
                case "late-close" -> lateClose(seed);
                case "killed", "watchdog" -> loopTransactions();
                case "absent-barrier" -> absentRank(Communicator::barrier);
                case "absent-allgather" -> absentRank(comm -> comm.allGatherBytesHost(new byte[] {(byte) comm.rank()}));
                case "late-create" -> lateCreate();
                case "interrupted-arrival" -> interruptedArrival();
                case "mismatch" -> mismatch(seed);
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
                CollectiveScenarios.outOfPlaceReductions(c);
                CollectiveScenarios.reduceToEveryRoot(c);
                CollectiveScenarios.gatherAndScatterOfEveryDtype(c);
                CollectiveScenarios.unevenAllToAllOfEveryDtype(c);
                CollectiveScenarios.unevenAllGatherOfEveryDtype(c);
                BufferScenarios.scaledSums(c);
                BufferScenarios.registeredNcclMemory(c);
                GraphScenarios.capturedSteps(c);
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

    private static void mismatch(long seed) {
        MpiCommunicators.run(MpiOptions.defaults(), comm -> {
            try (RankContext c = new RankContext(comm, seed)) {
                int count = comm.rank() == 1 ? 4095 : 4096;
                DeviceTensor t = c.upload(Data.fp32(c.seed(comm.rank(), "mismatch"), count));
                System.out.println("STARTED rank=" + comm.rank());
                System.out.flush();
                comm.allReduce(t, ReduceOp.SUM, c.compute());
                comm.synchronize();
            }
            System.out.println("UNEXPECTED rank=" + comm.rank() + ": the mismatched all-reduce returned");
            System.out.flush();
        });
    }

    private static void throwMidTransaction() {
        MpiCommunicators.run(MpiOptions.defaults(), MpiRank::failMidTransaction);
    }

    /** The close timeout of {@link #throwWithShortClose}: also how long its abort is waited for. */
    static final Duration HANG_ABORT_CLOSE = Duration.ofSeconds(5);

    /**
     * As {@link #throwMidTransaction} with a close timeout of {@link #HANG_ABORT_CLOSE}, for a job
     * whose failing rank's ncclCommAbort hangs (host emulation fault): the abort is abandoned at
     * that bound and the rank's MPI_Abort still ends the job.
     */
    private static void throwWithShortClose() {
        MpiCommunicators.run(MpiOptions.defaults().withCommunicator(CommunicatorOptions.defaults()
                .withCloseTimeout(HANG_ABORT_CLOSE)), MpiRank::failMidTransaction);
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

    /** The host-side deadline of {@link #absentRank}: the watchdog's timeout. */
    static final long ABSENT_DEADLINE_MILLIS = 3_000;

    /**
     * Every rank meets in a barrier; then the last rank sleeps far past the deadline instead of
     * joining {@code rendezvous}, which the others enter after printing {@code WAITING}. Their wait
     * must end at the deadline naming that rank, and their abort ends the job (the sleeper too).
     */
    private static void absentRank(java.util.function.Consumer<Communicator> rendezvous) {
        CommunicatorOptions options = CommunicatorOptions.defaults()
                .withWatchdog(Duration.ofMillis(ABSENT_DEADLINE_MILLIS)).withWatchdogInterval(Duration.ofMillis(50));
        MpiCommunicators.run(MpiOptions.defaults().withCommunicator(options), comm -> {
            comm.barrier();
            if (comm.rank() == comm.worldSize() - 1) {
                sleep(120_000);
            } else {
                System.out.println("WAITING rank=" + comm.rank());
                System.out.flush();
                rendezvous.accept(comm);
            }
            System.out.println("UNEXPECTED: rank " + comm.rank() + " finished");
        });
    }

    /** How late the last rank calls create in {@link #lateCreate}. */
    static final long LATE_CREATE_MILLIS = 120_000;
    /** The init timeout of {@link #lateCreate}: room for the other ranks' JVMs to start at different times. */
    static final long LATE_CREATE_INIT_TIMEOUT_MILLIS = 15_000;

    /** The last rank calls create long after the others, whose create must end at the init deadline naming it. */
    private static void lateCreate() {
        MpiLibrary mpi = MpiLibrary.load();
        int provided = mpi.initThread(MpiLibrary.THREAD_MULTIPLE);
        assertEquals(MpiLibrary.THREAD_MULTIPLE, provided, "thread level");
        int rank = mpi.rank(mpi.world());
        if (rank == mpi.size(mpi.world()) - 1) {
            sleep(LATE_CREATE_MILLIS);
        } else {
            System.out.println("CREATING rank=" + rank);
            System.out.flush();
        }
        CommunicatorOptions options = CommunicatorOptions.defaults()
                .withInitTimeout(Duration.ofMillis(LATE_CREATE_INIT_TIMEOUT_MILLIS));
        MpiCommunicators.run(MpiOptions.defaults().withCommunicator(options),
                comm -> System.out.println("UNEXPECTED: rank " + comm.rank() + " created"));
    }

    /**
     * Rank 0 enters a rendezvous of {@link MpiLibrary#arrive} on a thread it interrupts after
     * 500 ms, while the others stay away for 3 s: the exception must name them, carry the
     * interrupt and leave the interrupt status set. Then all meet in a fresh rendezvous (the
     * abandoned one's requests must not disturb it), and the others receive the message rank 0
     * sent before it let go.
     */
    private static void interruptedArrival() throws InterruptedException {
        MpiLibrary mpi = MpiLibrary.load();
        mpi.initThread(MpiLibrary.THREAD_MULTIPLE);
        MpiLibrary.Handle handle = mpi.dup(mpi.world());
        mpi.setErrorsReturn(handle);
        int rank = mpi.rank(handle);
        int size = mpi.size(handle);
        assertTrue(size >= 2, "world " + size);
        long minute = TimeUnit.SECONDS.toNanos(60);
        String details;
        if (rank == 0) {
            dev.jnccl.CommunicatorAbortedException[] failure = {null};
            boolean[] interruptKept = {false};
            Thread waiter = Thread.ofPlatform().start(() -> {
                try {
                    mpi.arrive(handle, 0, size, 100, "rank 0", "", new MpiLibrary.Wait("barrier #1", minute, () -> null));
                } catch (dev.jnccl.CommunicatorAbortedException e) {
                    failure[0] = e;
                    interruptKept[0] = Thread.currentThread().isInterrupted();
                }
            });
            Thread.sleep(500);
            waiter.interrupt();
            waiter.join(10_000);
            assertFalse(waiter.isAlive(), "the interrupted rendezvous still waits");
            assertTrue(failure[0] != null, "the interrupted rendezvous did not throw");
            String others = size == 2 ? "rank 1" : "ranks " + java.util.stream.IntStream.range(1, size).boxed().toList();
            assertEquals("barrier #1 on rank 0 was interrupted while " + others + " had not arrived (the interrupt"
                    + " status is kept)", failure[0].getMessage());
            assertTrue(failure[0].getCause() instanceof InterruptedException, String.valueOf(failure[0].getCause()));
            assertTrue(interruptKept[0], "interrupt status cleared");
            details = "interrupted=" + failure[0].getMessage().replace(' ', '_');
        } else {
            sleep(3_000);
            details = "absent";
        }
        mpi.arrive(handle, rank, size, 101, "rank " + rank, "", new MpiLibrary.Wait("barrier #2", minute, () -> null));
        if (rank != 0) {
            // Rank 0 freed its send of the abandoned rendezvous: MPI still delivers it.
            long deadline = System.nanoTime() + minute;
            while (mpi.receiveLong(0, 100, handle).isEmpty()) {
                assertTrue(System.nanoTime() < deadline, "rank 0's abandoned arrival message never came");
                Thread.sleep(10);
            }
        }
        mpi.barrier(handle, new MpiLibrary.Wait("barrier", minute, () -> null));
        mpi.free(handle);
        System.out.println("VERDICT rank=" + rank + " world=" + size + " PASS abi=" + mpi.abi().name() + " " + details);
        System.out.flush();
        mpi.finalizeMpi();
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            throw new IllegalStateException(e);
        }
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
