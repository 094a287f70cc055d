package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.it.ThreadsFailureTest.Outcome;
import dev.jnccl.testsupport.NativeEnv;
import dev.jnccl.threads.ThreadsOptions;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * A convenience operation that gets stuck is ended by the watchdog like a stuck transaction: every
 * rank's {@link Communicator#synchronize()} after the operation throws
 * {@link CommunicatorAbortedException} within the watchdog timeout plus a margin, instead of waiting
 * forever. Convenience operations run as transactions, so the watchdog tracks them. Two ways to get
 * stuck: rank 1 hangs inside its second NCCL operation (injected by the host emulation), and, on any
 * backend including real NCCL, rank 0 never calls the collective the others are inside.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsStuckCollectiveTest {
    private static final int WORLD = 3;
    private static final int HUNG = 1;
    /**
     * The rank that skips: the broadcast's root, so that no operation can complete without it (real
     * NCCL lets a small send finish before its receiver arrives, so a skipping receiver would let
     * the root's broadcast return).
     */
    private static final int SKIPPING = 0;
    private static final int N = 840;
    private static final Duration WATCHDOG = Duration.ofSeconds(2);
    private static final Duration MARGIN = Duration.ofSeconds(3);

    /** The convenience operations; each is the second NCCL operation of every rank. */
    enum Op {
        ALL_REDUCE, REDUCE_MEAN, BROADCAST, ALL_TO_ALL, REDUCE_SCATTER;

        void run(Communicator comm, DeviceTensor a, DeviceTensor b, CudaStream stream) {
            switch (this) {
                case ALL_REDUCE -> comm.allReduce(a, ReduceOp.SUM, stream);
                case REDUCE_MEAN -> comm.reduceMean(a, stream);
                case BROADCAST -> comm.broadcast(a, SKIPPING, stream);
                case ALL_TO_ALL -> comm.allToAll(a, b, stream);
                case REDUCE_SCATTER -> comm.reduceScatter(a, stream);
            }
        }
    }

    @RegisterExtension
    final PackMemory memory = new PackMemory();

    @ParameterizedTest
    @EnumSource(Op.class)
    @SuppressWarnings("try")
    void aStuckConvenienceOperationIsEndedByTheWatchdog(Op op) {
        Packs.assumeHost("JNCCL_HOST_FAULT injects the hang");
        try (NativeEnv ignored = NativeEnv.set("JNCCL_HOST_FAULT", "hang", "JNCCL_HOST_FAULT_RANK",
                Integer.toString(HUNG), "JNCCL_HOST_FAULT_AT", "2")) {
            // Operation 2: rank 1 hangs inside it; the others wait for rank 1.
            runUntilTheWatchdog(op, "rank " + HUNG + " hangs in it", op::run);
        }
    }

    /**
     * Rank 0 skips the second operation (a mismatched collective: the others wait inside NCCL for a
     * rank that never comes) and only watches its communicator. Nothing is injected, so this runs on
     * real NCCL too: a waiting rank's watchdog aborts, the pack's abort reaches rank 0, whose
     * synchronize() then throws like the others'.
     */
    @ParameterizedTest
    @EnumSource(Op.class)
    void aCollectiveARankNeverJoinsIsEndedByTheWatchdog(Op op) {
        runUntilTheWatchdog(op, "rank " + SKIPPING + " never joined it", (comm, a, b, stream) -> {
            if (comm.rank() != SKIPPING) {
                op.run(comm, a, b, stream);
                return;
            }
            // Bounded: the watchdog's timeout plus the margin the others are held to.
            long deadline = System.nanoTime() + WATCHDOG.plus(MARGIN).toNanos();
            while (!comm.isAborted() && System.nanoTime() - deadline < 0) {
                try {
                    Thread.sleep(10);
                } catch (InterruptedException e) {
                    // The failing pack interrupts its ranks' code after aborting their communicators.
                    Thread.currentThread().interrupt();
                    assertTrue(comm.isAborted(), "rank " + comm.rank() + " interrupted while skipping " + op
                            + " but its communicator was not aborted");
                    break;
                }
            }
        });
    }

    /** What a rank does as the second operation (the one that never completes). */
    @FunctionalInterface
    private interface SecondOperation {
        void run(Communicator comm, DeviceTensor a, DeviceTensor b, CudaStream stream);
    }

    /**
     * Every rank: a working all-reduce, then {@code second} and synchronize(), which must throw
     * {@link CommunicatorAbortedException}; then checks that the watchdog ended it in time.
     */
    private void runUntilTheWatchdog(Op op, String whyItCannotComplete, SecondOperation second) {
        ThreadsOptions options = ThreadsOptions.defaults().withCommunicator(
                CommunicatorOptions.defaults().withWatchdog(WATCHDOG));
        Map<Integer, Long> releasedAfterNanos = new ConcurrentHashMap<>();
        Outcome outcome = ThreadsFailureTest.runFailing(WORLD, options, comm -> {
            DeviceTensor a = memory.fp32(N * WORLD);
            DeviceTensor b = memory.fp32(N * WORLD);
            try (CudaStream stream = CudaStream.create()) {
                // Operation 1 works.
                comm.allReduce(a, ReduceOp.MAX, stream);
                comm.synchronize();
                long start = System.nanoTime();
                try {
                    second.run(comm, a, b, stream);
                    comm.synchronize();
                } catch (CommunicatorAbortedException e) {
                    releasedAfterNanos.put(comm.rank(), System.nanoTime() - start);
                    throw e;
                }
                fail("rank " + comm.rank() + ": " + op + " and synchronize() returned normally although "
                        + whyItCannotComplete);
            }
        });
        assertEndedByTheWatchdog(op, outcome, releasedAfterNanos);
    }

    private static void assertEndedByTheWatchdog(Op op, Outcome outcome, Map<Integer, Long> releasedAfterNanos) {
        assertTrue(ThreadsFailureTest.chain(outcome.thrown()).contains("watchdog"),
                () -> "not aborted by the watchdog: " + ThreadsFailureTest.describe(outcome.thrown()));
        for (int r = 0; r < WORLD; r++) {
            int rank = r;
            Throwable t = outcome.byRank().get(r);
            assertInstanceOf(CommunicatorAbortedException.class, t, () -> "rank " + rank + ": "
                    + ThreadsFailureTest.describe(t));
            Long nanos = releasedAfterNanos.get(r);
            assertNotNull(nanos, "rank " + r + " was not released from the stuck " + op);
            assertTrue(nanos < WATCHDOG.plus(MARGIN).toNanos(), () -> "rank " + rank + " was released after "
                    + TimeUnit.NANOSECONDS.toMillis(nanos) + " ms (watchdog " + WATCHDOG.toMillis() + " ms + margin "
                    + MARGIN.toMillis() + " ms)");
        }
        assertEquals(WORLD, releasedAfterNanos.size());
        String recent = ThreadsFailureTest.describe(outcome.thrown());
        System.out.println("stuck " + op + ": released after " + releasedAfterNanos.entrySet().stream()
                .map(e -> e.getKey() + "=" + TimeUnit.NANOSECONDS.toMillis(e.getValue()) + " ms").toList() + "; " + recent);
    }
}
