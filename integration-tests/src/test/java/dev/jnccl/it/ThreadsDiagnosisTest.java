package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.Diagnosis;
import dev.jnccl.DeviceTensor;
import dev.jnccl.RankSummary;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.it.ThreadsFailureTest.Outcome;
import dev.jnccl.testsupport.NativeEnv;
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
 * When a threads-mode pack hangs, the rank that notices (its watchdog, or a host-side wait past its
 * deadline) gathers every rank's summary from the pack, and the verdict names the culprit: it is the
 * first line of every rank's exception message and of {@link dev.jnccl.threads.ThreadsPack#join()}'s,
 * and {@link CommunicatorAbortedException#diagnosis()} gives the whole diagnosis everywhere. The
 * cases: a rank that skips a collective and one that lags in user code (never reached, with the
 * line of user code it is at), a rank that returns early (closed after its count), a rank missing
 * from a barrier, every rank inside a collective that hangs on one rank's stream (the emulation's
 * {@code hang}), and a rank held inside its enqueue ({@code hang-enqueue}). (A mismatched count is
 * failed by the emulation itself, as an asynchronous error; the verdict on mismatches is unit-tested
 * in core.)
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsDiagnosisTest {
    private static final int WORLD = 4;
    private static final int CULPRIT = 2;
    private static final int N = 840 * WORLD;
    private static final String SECOND = "allReduce SUM FP32 " + N + " elements (" + 4L * N + " bytes)";
    private static final Duration WATCHDOG = Duration.ofSeconds(2);
    private static final ThreadsOptions OPTIONS = ThreadsOptions.defaults().withCommunicator(CommunicatorOptions
            .defaults().withWatchdog(WATCHDOG).withWatchdogInterval(Duration.ofMillis(50)));

    /** The line of user code the culprit waits at (set by {@link #idle} as it starts). */
    private static volatile int idleLine;

    @RegisterExtension
    final PackMemory memory = new PackMemory();

    /**
     * The culprit's user code, outside jnccl: sleeps, three watchdog timeouts at most; the failing
     * pack interrupts it once its communicator is aborted.
     */
    private static void idle() {
        idleLine = new Throwable().getStackTrace()[0].getLineNumber() + 2;
        try {
            Thread.sleep(WATCHDOG.multipliedBy(3));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt(); // the pack's interrupt: it failed
        }
    }

    /** Every rank: a working all-reduce (transaction #1), then {@code second} and a synchronize that must throw. */
    private Outcome run(Consumer<Communicator> second) {
        return ThreadsFailureTest.runFailing(WORLD, OPTIONS, comm -> {
            DeviceTensor tensor = memory.fp32(N);
            try (CudaStream stream = CudaStream.create()) {
                comm.allReduce(tensor, ReduceOp.MAX, stream);
                comm.synchronize();
                second.accept(comm);
                Thread.interrupted(); // an idle culprit was interrupted by the failing pack: the wait below says why
                comm.allReduce(tensor, ReduceOp.SUM, stream);
                comm.synchronize();
            }
            fail("rank " + comm.rank() + ": transaction #2 completed although rank " + CULPRIT + " never joined it");
        });
    }

    @Test
    void aRankThatSkipsACollectiveIsNamedWithItsLineOfUserCode() {
        Outcome outcome = ThreadsFailureTest.runFailing(WORLD, OPTIONS, comm -> {
            DeviceTensor tensor = memory.fp32(N);
            try (CudaStream stream = CudaStream.create()) {
                comm.allReduce(tensor, ReduceOp.MAX, stream);
                comm.synchronize();
                if (comm.rank() == CULPRIT) {
                    idle(); // skips the all-reduce; then finds its communicator aborted
                    Thread.interrupted();
                } else {
                    comm.allReduce(tensor, ReduceOp.SUM, stream);
                }
                comm.synchronize();
            }
            fail("rank " + comm.rank() + ": synchronize returned although rank " + CULPRIT + " skipped transaction #2");
        });
        String verdict = "rank " + CULPRIT + " never reached transaction #2 (it is in user code: at"
                + " ThreadsDiagnosisTest.idle(ThreadsDiagnosisTest.java:" + idleLine + "))";
        assertEveryRankSays(outcome, verdict);
    }

    @Test
    void aRankThatLagsInUserCodeIsNamedWithItsLineOfUserCode() {
        Outcome outcome = run(comm -> {
            if (comm.rank() == CULPRIT) {
                idle(); // then goes on to the all-reduce, too late
            }
        });
        String verdict = "rank " + CULPRIT + " never reached transaction #2 (it is in user code: at"
                + " ThreadsDiagnosisTest.idle(ThreadsDiagnosisTest.java:" + idleLine + "))";
        assertEveryRankSays(outcome, verdict);
    }

    @Test
    void aRankThatReturnsEarlyIsNamedWithItsCount() {
        Outcome outcome = ThreadsFailureTest.runFailing(WORLD, OPTIONS, comm -> {
            DeviceTensor tensor = memory.fp32(N);
            try (CudaStream stream = CudaStream.create()) {
                comm.allReduce(tensor, ReduceOp.MAX, stream);
                comm.synchronize();
                if (comm.rank() == CULPRIT) {
                    return;
                }
                comm.allReduce(tensor, ReduceOp.SUM, stream);
                comm.synchronize();
            }
            fail("rank " + comm.rank() + ": synchronize returned although rank " + CULPRIT + " returned early");
        });
        assertEveryRankSays(outcome, "rank " + CULPRIT + " closed its communicator after 1 transaction(s) (its work"
                + " returned)");
    }

    @Test
    void aRankMissingFromABarrierIsNamedWithItsLineOfUserCode() {
        Outcome outcome = ThreadsFailureTest.runFailing(WORLD, OPTIONS, comm -> {
            DeviceTensor tensor = memory.fp32(N);
            try (CudaStream stream = CudaStream.create()) {
                comm.allReduce(tensor, ReduceOp.MAX, stream);
                comm.synchronize();
            }
            if (comm.rank() == CULPRIT) {
                idle();
                Thread.interrupted();
            }
            comm.barrier();
            fail("rank " + comm.rank() + ": the barrier returned although rank " + CULPRIT + " was not in it");
        });
        assertEveryRankSays(outcome, "rank " + CULPRIT + " never reached barrier (it is in user code: at"
                + " ThreadsDiagnosisTest.idle(ThreadsDiagnosisTest.java:" + idleLine + "))");
    }

    /** Rank 2's second all-reduce hangs on its stream: every rank is inside it, with the same commands. */
    @Test
    @SuppressWarnings("try")
    void everyRankInsideACollectiveThatHangsBlamesNcclOrTheTransport() {
        Packs.assumeHost("JNCCL_HOST_FAULT=hang injects the hang");
        Outcome outcome;
        try (NativeEnv ignored = NativeEnv.set("JNCCL_HOST_FAULT", "hang", "JNCCL_HOST_FAULT_RANK",
                Integer.toString(CULPRIT), "JNCCL_HOST_FAULT_AT", "2")) {
            outcome = run(comm -> { });
        }
        assertEveryRankSays(outcome, "every rank is inside transaction #2 with the same commands: NCCL or the transport"
                + " is stuck (" + SECOND + ")");
    }

    /** Rank 2 is held inside the enqueue of its second all-reduce (ncclGroupEnd does not return). */
    @Test
    @SuppressWarnings("try")
    void aRankHeldInsideItsEnqueueIsNamed() {
        Packs.assumeHost("JNCCL_HOST_FAULT=hang-enqueue holds the thread inside ncclGroupEnd");
        Outcome outcome;
        try (NativeEnv ignored = NativeEnv.set("JNCCL_HOST_FAULT", "hang-enqueue", "JNCCL_HOST_FAULT_RANK",
                Integer.toString(CULPRIT), "JNCCL_HOST_FAULT_AT", "2")) {
            outcome = run(comm -> { });
        }
        assertEveryRankSays(outcome, "rank " + CULPRIT + " is held inside the enqueue of transaction #2 while the other"
                + " ranks wait: NCCL or the transport does not return on it");
    }

    /**
     * join()'s exception, each rank's own and every one attached to join()'s: a
     * {@link CommunicatorAbortedException} whose first line is {@code verdict} and whose diagnosis has it,
     * from every rank's summary.
     */
    private static void assertEveryRankSays(Outcome outcome, String verdict) {
        List<Throwable> all = new ArrayList<>();
        all.add(outcome.thrown());
        all.addAll(List.of(outcome.thrown().getSuppressed()));
        all.addAll(outcome.byRank().values());
        assertTrue(outcome.thrown().getSuppressed().length >= WORLD - 1, () -> "every rank's failure is attached to"
                + " join()'s: " + ThreadsFailureTest.describe(outcome.thrown()));
        for (Throwable t : all) {
            CommunicatorAbortedException e = assertInstanceOf(CommunicatorAbortedException.class, t,
                    () -> ThreadsFailureTest.describe(t));
            assertEquals(verdict, e.getMessage().lines().findFirst().orElse(""), e::getMessage);
            Diagnosis diagnosis = e.diagnosis().orElseThrow(() -> new AssertionError("no diagnosis: " + e));
            assertEquals(verdict, diagnosis.verdict());
            assertTrue(diagnosis.complete(), diagnosis::describe);
            assertEquals(List.of(0, 1, 2, 3), diagnosis.summaries().stream().map(RankSummary::rank).toList());
        }
        System.out.println("verdict: " + verdict + "\n  join(): " + outcome.thrown().getMessage().replace("\n", "\n  "));
    }
}
