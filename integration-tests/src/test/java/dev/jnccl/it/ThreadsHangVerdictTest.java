package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.it.ThreadsFailureTest.Outcome;
import dev.jnccl.threads.ThreadsOptions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The hangs users meet most, at world 2 (what real NCCL documents for two ranks sharing one GPU), on
 * whichever backend runs the tests: a rank that all-reduces one element fewer than its peer, and a rank
 * that skips a collective. Real NCCL checks neither: the count mismatch hangs in the collective and the
 * skipped collective waits for the peer forever, so the watchdog aborts and its diagnosis names the
 * culprit and the differing value. The host emulation knows both ranks' arguments and fails the
 * mismatched collective itself, with its own verdict naming the same rank and count. With
 * {@code jnccl.debug=detail}'s check on, the mismatch is refused before NCCL runs it, on both backends.
 * On the GPU machine: {@code JNCCL_MULTI_RANK_TESTS=ThreadsHangVerdictTest scripts/gpu/gpu-test.sh
 * --threads-multi-rank}.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsHangVerdictTest {
    private static final int WORLD = 2;
    private static final int CULPRIT = 1;
    private static final int N = 4096;
    private static final Duration WATCHDOG = Duration.ofSeconds(3);
    private static final Duration JOIN_BOUND = Duration.ofSeconds(60);
    private static final CommunicatorOptions WATCHED = CommunicatorOptions.defaults().withWatchdog(WATCHDOG)
            .withWatchdogInterval(Duration.ofMillis(50));

    @RegisterExtension
    final PackMemory memory = new PackMemory();

    /** Every rank: a checked-by-completion all-reduce (transaction #1), then {@code second}, which must fail. */
    private Outcome run(CommunicatorOptions options, Consumer<Communicator> second) {
        return ThreadsFailureTest.runFailing(WORLD, ThreadsOptions.defaults().withCommunicator(options), comm -> {
            try (CudaStream stream = CudaStream.create()) {
                comm.allReduce(memory.fp32(N), ReduceOp.MAX, stream);
                comm.synchronize();
                second.accept(comm);
                comm.synchronize();
            }
            fail("rank " + comm.rank() + ": transaction #2 completed although rank " + CULPRIT + " did not match it");
        }, JOIN_BOUND);
    }

    private void mismatchedCount(Communicator comm) {
        try (CudaStream stream = CudaStream.create()) {
            DeviceTensor tensor = memory.fp32(comm.rank() == CULPRIT ? N - 1 : N);
            comm.allReduce(tensor, ReduceOp.SUM, stream);
            comm.synchronize();
        }
    }

    @Test
    void aMismatchedCountIsNamedWithBothCounts() {
        Outcome outcome = run(WATCHED, this::mismatchedCount);
        if (Packs.onHost()) {
            // The emulation refuses the collective as it meets both ranks' arguments.
            assertEveryRankContains(outcome, "collective #", " differs", "rank 1 ncclAllReduce 4095");
        } else {
            assertEveryRankLeadsWith(outcome, "transaction #2 differs: rank 0 allReduce SUM FP32 4096 elements (16384"
                    + " bytes), rank 1 allReduce SUM FP32 4095 elements (16380 bytes)");
        }
    }

    @Test
    void withTheConsistencyCheckTheMismatchIsRefusedBeforeNccl() {
        Outcome outcome = run(WATCHED.withConsistencyChecks(true), this::mismatchedCount);
        assertEveryRankContains(outcome, "transaction #2 refused before NCCL ran it (consistency check,"
                + " jnccl.debug=detail): the count of collective 1 differs: rank 0 all-reduces 4096 FP32 with SUM;"
                + " rank 1 all-reduces 4095 FP32 with SUM");
    }

    @Test
    void aSkippedCollectiveIsNamed() {
        Outcome outcome = run(WATCHED, comm -> {
            if (comm.rank() == CULPRIT) {
                sleepPastTheWatchdog(); // skips the all-reduce; then finds its communicator aborted
                Thread.interrupted();
                return;
            }
            try (CudaStream stream = CudaStream.create()) {
                comm.allReduce(memory.fp32(N), ReduceOp.SUM, stream);
                comm.synchronize();
            }
        });
        assertEveryRankLeadsWith(outcome, "rank " + CULPRIT + " never reached transaction #2 (it is in user code: at"
                + " ThreadsHangVerdictTest.sleepPastTheWatchdog(ThreadsHangVerdictTest.java:");
    }

    /** User code outside jnccl: three watchdog timeouts at most; the failing pack interrupts it. */
    private static void sleepPastTheWatchdog() {
        try {
            Thread.sleep(WATCHDOG.multipliedBy(3));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static List<Throwable> everyFailure(Outcome outcome) {
        List<Throwable> all = new ArrayList<>();
        all.add(outcome.thrown());
        all.addAll(List.of(outcome.thrown().getSuppressed()));
        all.addAll(outcome.byRank().values());
        assertTrue(outcome.thrown().getSuppressed().length >= WORLD - 1, () -> "every other rank's failure is"
                + " attached to join()'s: " + ThreadsFailureTest.describe(outcome.thrown()));
        return all;
    }

    /** Every rank's exception and join()'s: a CommunicatorAbortedException whose first line starts with {@code verdict}. */
    private static void assertEveryRankLeadsWith(Outcome outcome, String verdict) {
        for (Throwable t : everyFailure(outcome)) {
            CommunicatorAbortedException e = assertInstanceOf(CommunicatorAbortedException.class, t,
                    () -> ThreadsFailureTest.describe(t));
            String first = e.getMessage().lines().findFirst().orElse("");
            assertTrue(first.startsWith(verdict), () -> "expected the verdict\n  " + verdict + "\nfirst, got\n  "
                    + e.getMessage());
        }
    }

    /** Every rank's exception chain and join()'s contain each of {@code parts}. */
    private static void assertEveryRankContains(Outcome outcome, String... parts) {
        for (Throwable t : everyFailure(outcome)) {
            String chain = ThreadsFailureTest.chain(t);
            for (String part : parts) {
                assertTrue(chain.contains(part), () -> "\"" + part + "\" missing from " + chain);
            }
        }
    }
}
