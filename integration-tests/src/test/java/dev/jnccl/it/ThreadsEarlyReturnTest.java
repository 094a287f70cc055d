package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.JncclInterruptedException;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.it.ThreadsFailureTest.Outcome;
import dev.jnccl.testsupport.NativeEnv;
import dev.jnccl.threads.ThreadsOptions;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * A rank whose work returns after fewer transactions than a peer executed: the peer waits for
 * collectives that rank will never join. The peer's watchdog learns it from the pack at its next
 * poll and aborts, so the pack ends and every rank's exception names the rank that returned and
 * the counts, as MPI mode does for a rank that closed its communicator early. Meanwhile each rank
 * frees its buffers whenever its code does: a free that waits behind the collective that cannot
 * complete holds up no other rank's free (the returning rank's would otherwise keep it from
 * returning at all).
 *
 * <p>The watchdog's timeout is ten minutes, far beyond the hang guard: only the poll of the pack can
 * end these packs before the guard. The guard is no performance assertion.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsEarlyReturnTest {
    private static final int WORLD = 2;
    private static final int WAITING = 0;
    private static final int EARLY = 1;
    private static final int N = 840 * WORLD;
    private static final Duration HANG_GUARD = Duration.ofSeconds(30);
    private static final ThreadsOptions OPTIONS = ThreadsOptions.defaults().withCommunicator(CommunicatorOptions
            .defaults().withWatchdog(Duration.ofMinutes(10)).withWatchdogInterval(Duration.ofMillis(50)));

    @RegisterExtension
    final PackMemory memory = new PackMemory();

    /** How the waiting rank waits for its all-reduce. */
    enum Wait {
        SYNCHRONIZE, AWAIT;

        void run(Communicator comm, CudaEvent done) {
            if (this == SYNCHRONIZE) {
                comm.synchronize();
            } else {
                comm.await(done);
            }
        }
    }

    /**
     * Rank 0 enqueues an all-reduce, is interrupted while waiting for it (a clean
     * {@link JncclInterruptedException}: the communicator stays usable), frees its buffers (the
     * stream waits behind the collective) and waits again; rank 1 returns without the all-reduce.
     * With {@code warmUp}, both ranks first run an all-reduce together (checked), so that real NCCL
     * has connected the ranks and rank 0 waits for the second one outside its enqueue.
     */
    @ParameterizedTest
    @CsvSource({"SYNCHRONIZE, false", "AWAIT, false", "SYNCHRONIZE, true", "AWAIT, true"})
    void aRankWaitingForACollectiveItsPeerReturnedWithoutIsAbortedNamingThePeerAndTheCounts(Wait wait,
                                                                                            boolean warmUp) {
        if (!warmUp) {
            Packs.assumeHost("real NCCL connects the ranks in the first collective: rank 0 would wait inside its"
                    + " enqueue, the case of aRankHeldInsideAnEnqueueForACollectiveItsPeerReturnedWithoutIsAborted");
        }
        long seed = Packs.newSeed();
        Map<Integer, Throwable> interrupted = new ConcurrentHashMap<>();
        List<AutoCloseable> later = new CopyOnWriteArrayList<>();
        Outcome outcome = run(OPTIONS, comm -> {
            DeviceMemory buffer = DeviceMemory.allocate(DType.FP32, N);
            CudaStream stream = CudaStream.create();
            CudaEvent done = CudaEvent.create();
            try {
                buffer.copyFromHost(MemorySegment.ofArray(input(seed, comm.rank())));
                if (warmUp) {
                    warmUp(comm, buffer, stream, seed);
                }
                if (comm.rank() == EARLY) {
                    // Freed after the pack: where the ranks share one GPU, a cudaFree here would wait
                    // behind the waiting rank's collective (device-wide) and this rank would never return.
                    later.addAll(List.of(done, stream, buffer));
                    return;
                }
                comm.allReduce(buffer.tensor(DType.FP32), ReduceOp.SUM, stream);
                done.record(stream);
                // Interrupted as it waits: the wait looks at the interrupt first thing.
                Thread.currentThread().interrupt();
                interrupted.put(comm.rank(), assertThrows(JncclInterruptedException.class,
                        () -> wait.run(comm, done)));
                assertTrue(Thread.interrupted(), "the interrupt status is kept by " + wait);
                assertFalse(comm.isAborted(), "an interrupted " + wait + " leaves the communicator usable");
                // The user frees what it allocated: each waits behind the collective rank 1 never joins.
                buffer.close();
                stream.close();
                wait.run(comm, done);
            } finally {
                if (comm.rank() != EARLY) {
                    done.close();
                    stream.close();
                    buffer.close();
                }
            }
        });
        for (AutoCloseable resource : later) {
            try {
                resource.close();
            } catch (Exception e) {
                throw new AssertionError("freeing the early rank's resources after the pack", e);
            }
        }
        assertInstanceOf(JncclInterruptedException.class, interrupted.get(WAITING));
        assertAbortedForTheEarlyRank(outcome, warmUp ? 1 : 0, warmUp ? 2 : 1, warmUp ? 2 : 1);
    }

    /** Rank {@code rank}'s data for the all-reduces. */
    private static float[] input(long seed, int rank) {
        return Data.fp32(Data.seed(seed, rank, "early return"), N);
    }

    /** An all-reduce (MAX: exact in any order) of every rank's {@link #input}, checked element by element. */
    private static void warmUp(Communicator comm, DeviceMemory buffer, CudaStream stream, long seed) {
        comm.allReduce(buffer.tensor(DType.FP32), ReduceOp.MAX, stream);
        comm.synchronize();
        float[] expected = input(seed, 0);
        for (int rank = 1; rank < WORLD; rank++) {
            float[] other = input(seed, rank);
            for (int i = 0; i < N; i++) {
                expected[i] = Math.max(expected[i], other[i]);
            }
        }
        float[] actual = new float[N];
        buffer.copyToHost(MemorySegment.ofArray(actual));
        Verify.floats("warm-up all-reduce MAX on rank " + comm.rank() + " (seed " + seed + ")", expected, actual);
    }

    /**
     * Rank 0 is held inside the enqueue of its all-reduce (real NCCL connects to the peers in the
     * first collectives; the emulation's {@code hang-enqueue} holds the call until an abort) while
     * rank 1 returns without it: the enqueue has started, so it counts as executed.
     */
    @Test
    @SuppressWarnings("try")
    void aRankHeldInsideAnEnqueueForACollectiveItsPeerReturnedWithoutIsAborted() {
        Packs.assumeHost("JNCCL_HOST_FAULT=hang-enqueue holds the thread inside ncclGroupEnd");
        Outcome outcome;
        try (NativeEnv ignored = NativeEnv.set("JNCCL_HOST_FAULT", "hang-enqueue", "JNCCL_HOST_FAULT_RANK",
                Integer.toString(WAITING), "JNCCL_HOST_FAULT_AT", "1")) {
            outcome = run(OPTIONS, comm -> {
                if (comm.rank() == EARLY) {
                    return;
                }
                comm.allReduce(memory.fp32(N), ReduceOp.SUM, comm.stream());
            });
        }
        assertAbortedForTheEarlyRank(outcome, 0, 1, 1);
    }

    /**
     * Rank 0 runs ahead of rank 1, further than {@link ThreadsOptions#maxLead()}: the launch-queue
     * throttle would hold it until rank 1 catches up, which a rank whose work returned never does.
     */
    @Test
    void aRankAheadOfAPeerThatReturnedIsNotHeldInTheThrottle() {
        int transactions = 3;
        Outcome outcome = run(OPTIONS.withMaxLead(1), comm -> {
            if (comm.rank() == EARLY) {
                return;
            }
            DeviceTensor tensor = memory.fp32(N);
            try (CudaStream stream = CudaStream.create()) {
                for (int t = 0; t < transactions; t++) {
                    comm.allReduce(tensor, ReduceOp.MAX, stream);
                }
                comm.synchronize();
            }
        });
        // Its watchdog may look while rank 0 still enqueues: it has executed one transaction at least.
        assertAbortedForTheEarlyRank(outcome, 0, 1, transactions);
    }

    /**
     * Rank 0 waits in a barrier (a host-side wait) while rank 1 returns: the launcher's end of rank
     * 1's work meets the barrier, and the mismatch fails the pack at once, naming rank 1.
     */
    @Test
    void aRankInABarrierItsPeerReturnedWithoutIsReleasedNamingThePeer() {
        Outcome outcome = run(OPTIONS, comm -> {
            if (comm.rank() != EARLY) {
                comm.barrier();
            }
        });
        Throwable waiting = outcome.byRank().get(WAITING);
        assertInstanceOf(CommunicatorAbortedException.class, waiting, () -> ThreadsFailureTest.describe(waiting));
        String expected = "rank " + EARLY + " returned from its work while rank " + WAITING + " is in barrier";
        assertTrue(ThreadsFailureTest.chain(waiting).contains(expected), () -> ThreadsFailureTest.describe(waiting));
        // Whichever of the two met the other in the barrier failed the pack; join() rethrows it.
        Throwable thrown = outcome.thrown();
        assertInstanceOf(CommunicatorAbortedException.class, thrown, () -> ThreadsFailureTest.describe(thrown));
        assertTrue(ThreadsFailureTest.chain(thrown).contains(expected), () -> ThreadsFailureTest.describe(thrown));
        Throwable[] suppressed = thrown.getSuppressed();
        assertEquals(WORLD - 1, suppressed.length, () -> "one suppressed exception per other rank expected: "
                + ThreadsFailureTest.describe(thrown));
        assertInstanceOf(CommunicatorAbortedException.class, suppressed[0]);
        assertTrue(ThreadsFailureTest.chain(suppressed[0]).contains(expected),
                () -> ThreadsFailureTest.describe(suppressed[0]));
    }

    /**
     * The waiting rank's own exception and join()'s say that rank 1 closed its communicator after
     * {@code closedAfter} transactions while the waiting rank executed between {@code fewest} and
     * {@code most}; every rank's exception is a {@link CommunicatorAbortedException} attached to the
     * rethrown one.
     */
    private static void assertAbortedForTheEarlyRank(Outcome outcome, long closedAfter, long fewest, long most) {
        Throwable waiting = outcome.byRank().get(WAITING);
        assertInstanceOf(CommunicatorAbortedException.class, waiting, () -> ThreadsFailureTest.describe(waiting));
        Pattern closedEarly = Pattern.compile("rank " + EARLY + " closed its communicator after " + closedAfter
                + " transaction\\(s\\) while this rank executed (\\d+)");
        Matcher counts = closedEarly.matcher(ThreadsFailureTest.chain(waiting));
        assertTrue(counts.find(), () -> "rank " + WAITING + " got " + ThreadsFailureTest.describe(waiting)
                + "; expected it to match \"" + closedEarly + "\"");
        long executed = Long.parseLong(counts.group(1));
        assertTrue(executed >= fewest && executed <= most, () -> "rank " + WAITING + " executed " + executed
                + " transactions, expected " + fewest + " to " + most + ": " + ThreadsFailureTest.describe(waiting));
        String expected = counts.group();
        // join() rethrows the pack's first failure, rank 0's abort by its watchdog, with what each
        // rank's thread threw attached: rank 0's work, rank 1 released from the end of its work.
        Throwable thrown = outcome.thrown();
        assertInstanceOf(CommunicatorAbortedException.class, thrown, () -> ThreadsFailureTest.describe(thrown));
        assertTrue(ThreadsFailureTest.chain(thrown).contains(expected), () -> ThreadsFailureTest.describe(thrown));
        List<Throwable> suppressed = List.of(thrown.getSuppressed());
        assertEquals(WORLD, suppressed.size(), () -> "one suppressed exception per rank expected: "
                + suppressed.stream().map(ThreadsFailureTest::describe).toList());
        assertTrue(suppressed.contains(waiting), () -> "rank " + WAITING + "'s exception is not attached to join()'s");
        for (Throwable t : suppressed) {
            assertInstanceOf(CommunicatorAbortedException.class, t, () -> ThreadsFailureTest.describe(t));
            assertTrue(ThreadsFailureTest.chain(t).contains(expected), () -> ThreadsFailureTest.describe(t));
        }
    }

    /** Runs {@code work} on a pack that must fail before the hang guard, leaving no pack thread behind. */
    private static Outcome run(ThreadsOptions options, Consumer<Communicator> work) {
        Outcome outcome = ThreadsFailureTest.runFailing(WORLD, options, work, HANG_GUARD);
        assertNotNull(outcome.byRank().get(WAITING), "rank " + WAITING + "'s work ended without an exception");
        return outcome;
    }
}
