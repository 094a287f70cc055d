package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.Backend;
import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorMode;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DType;
import dev.jnccl.JncclRuntime;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.testsupport.ChildJvm;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import dev.jnccl.threads.ThreadsPack;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * A pack fails (its ranks wait inside NCCL for a rank that never joins the collective, the
 * watchdog aborts) while rank 1's ncclCommAbort never returns (host emulation:
 * {@code JNCCL_HOST_FAULT=hang-abort}): the abort is abandoned at its bound, {@link ThreadsPack#join()}
 * still ends, every rank's exception is a {@link CommunicatorAbortedException}, the log names the
 * abandonment, and (the child JVM ends normally once main returns) no non-daemon thread is left.
 * Runs in a child JVM: the thread blocked in the emulation's abort stays there for good.
 */
class ThreadsAbortHangTest {
    private static final int WORLD = 3;
    /** The rank whose ncclCommAbort hangs. */
    private static final int HANGING_ABORT = 1;
    /** The rank that never calls the second collective. */
    private static final int SKIPPING = 0;
    private static final int N = 840 * WORLD;
    private static final Duration WATCHDOG = Duration.ofSeconds(2);
    /** The close timeout, which is also the abort's bound (at least 5 s). */
    private static final Duration CLOSE = Duration.ofSeconds(5);
    /**
     * What join() may take: the watchdog, the abandoned abort, then rank 1's close waiting for its
     * lock (held by the aborting thread until the bound), plus a margin for a loaded machine.
     * Without the bound the pack never ends.
     */
    private static final Duration JOIN_BOUND = WATCHDOG.plus(CLOSE.multipliedBy(2)).plusSeconds(10);

    @ParameterizedTest
    @EnumSource(CommunicatorMode.class)
    void aPackEndsWhenARanksAbortHangs(CommunicatorMode mode) throws Exception {
        assumeTrue(JncclRuntime.query().backend() == Backend.HOST, "JNCCL_HOST_FAULT=hang-abort is the emulation's");
        ChildJvm.Result result = ChildJvm.run(List.of("--enable-native-access=ALL-UNNAMED", "-Djnccl.backend=host"),
                Map.of("JNCCL_HOST_FAULT", "hang-abort", "JNCCL_HOST_FAULT_RANK", Integer.toString(HANGING_ABORT)),
                Pack.class, mode.name());
        String output = result.output();
        // Exit code 0: main returned and the JVM ended although the abort's thread never returns.
        assertEquals(0, result.exitCode(), output);
        assertTrue(output.contains("PASS"), output);
        System.out.println(mode + ": " + output.lines().filter(l -> l.startsWith("PASS")).findFirst().orElseThrow());
        assertTrue(output.contains("ncclCommAbort of rank " + HANGING_ABORT + " hangs for ever"),
                "the fault did not hit\n" + output);
        assertTrue(output.contains("rank " + HANGING_ABORT + ": ncclCommAbort did not return within " + CLOSE.toMillis()
                + " ms: the communicator was abandoned, its native resources leaked on purpose"), output);
        assertTrue(output.contains("jnccl-abort-rank-" + HANGING_ABORT + " blocked in ncclCommAbort"), output);
    }

    /** The child JVM: the failing pack, checked; main returns at the end. */
    public static final class Pack {
        private Pack() {}

        /**
         * Runs the pack in {@code args[0]}'s mode and checks how it ended.
         *
         * @param args the {@link CommunicatorMode}
         */
        public static void main(String[] args) {
            CommunicatorMode mode = CommunicatorMode.valueOf(args[0]);
            ThreadsOptions options = ThreadsOptions.defaults().withCommunicator(CommunicatorOptions.defaults()
                    .withMode(mode).withWatchdog(WATCHDOG).withWatchdogInterval(Duration.ofMillis(50))
                    .withCloseTimeout(CLOSE));
            int devices = Cuda.deviceCount();
            if (WORLD > devices) {
                // Several ranks per device, as on a one-GPU machine (the emulation needs
                // NCCL_MULTI_RANK_GPU_ENABLE=1 for it, as NCCL 2.30 does).
                int[] deviceOfRank = new int[WORLD];
                for (int rank = 0; rank < WORLD; rank++) {
                    deviceOfRank[rank] = rank % devices;
                }
                options = options.withDevices(deviceOfRank);
            }
            Map<Integer, Throwable> byRank = new ConcurrentHashMap<>();
            long start = System.nanoTime();
            ThreadsPack pack = ThreadsCommunicators.launch(WORLD, options, comm -> {
                try {
                    work(comm);
                } catch (Throwable t) {
                    byRank.put(comm.rank(), t);
                    throw t;
                }
            });
            Thread joining = Thread.ofPlatform().name("joining").start(() -> {
                try {
                    pack.join();
                } catch (RuntimeException expected) {
                    // checked below, rank by rank
                }
            });
            try {
                assertTrue(joining.join(JOIN_BOUND), "join() did not end within " + JOIN_BOUND);
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            }
            long millis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            assertTrue(pack.hasException(), "the pack did not fail");
            for (int r = 0; r < WORLD; r++) {
                Throwable t = byRank.get(r);
                assertInstanceOf(CommunicatorAbortedException.class, t, "rank " + r + ": " + t);
            }
            Packs.assertNoPackThreads();
            Thread abortThread = Thread.getAllStackTraces().keySet().stream()
                    .filter(t -> t.getName().equals("jnccl-abort-rank-" + HANGING_ABORT)).findFirst().orElse(null);
            assertNotNull(abortThread, "the abort's thread is gone although ncclCommAbort never returns");
            assertTrue(abortThread.isDaemon(), "the abort's thread must not keep the JVM alive");
            System.out.println("PASS joined after " + millis + " ms; " + byRank);
            System.out.flush();
        }

        /**
         * A checked all-reduce of random ints, then a second all-reduce that rank 0 never calls:
         * the others wait inside it until the watchdog aborts; every rank's synchronize() throws.
         * (On a loaded machine the short watchdog may already catch the first one: the pack fails
         * the same way.)
         */
        private static void work(Communicator comm) {
            int rank = comm.rank();
            try (CudaStream stream = CudaStream.create(); DeviceMemory memory = DeviceMemory.allocate(DType.INT32, N)) {
                memory.copyFromHost(MemorySegment.ofArray(Data.int32(Data.seed(7, rank, "abort-hang"), N)));
                comm.allReduce(memory.tensor(DType.INT32), ReduceOp.SUM, stream);
                comm.synchronize();
                int[] expected = new int[N];
                for (int r = 0; r < WORLD; r++) {
                    int[] theirs = Data.int32(Data.seed(7, r, "abort-hang"), N);
                    for (int i = 0; i < N; i++) {
                        expected[i] += theirs[i]; // int addition wraps as NCCL's does, in any order
                    }
                }
                int[] result = new int[N];
                memory.copyToHost(MemorySegment.ofArray(result));
                for (int i = 0; i < N; i++) {
                    assertEquals(expected[i], result[i], "rank " + rank + " element " + i);
                }
                if (rank != SKIPPING) {
                    comm.allReduce(memory.tensor(DType.INT32), ReduceOp.SUM, stream);
                } else {
                    awaitAbort(comm);
                }
                comm.synchronize();
                fail("rank " + rank + ": synchronize() returned although rank " + SKIPPING + " skipped the collective");
            }
        }

        /** Rank 0 waits (bounded) for the pack's abort to reach its communicator. */
        private static void awaitAbort(Communicator comm) {
            long deadline = System.nanoTime() + JOIN_BOUND.toNanos();
            while (!comm.isAborted() && System.nanoTime() - deadline < 0) {
                try {
                    Thread.sleep(10);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt(); // the failing pack interrupts its ranks after the aborts
                    return;
                }
            }
        }
    }
}
