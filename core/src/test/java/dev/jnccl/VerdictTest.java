package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.RankSummary.Activity;
import dev.jnccl.RankSummary.Pending;
import dev.jnccl.RankSummary.Status;
import dev.jnccl.spi.Diagnoses;
import java.util.ArrayList;
import java.util.List;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.Test;

/**
 * The verdict of a diagnosis as a pure function of the ranks' summaries: each form of the verdict,
 * the cases where the watchdog's completion probes lag (ranks ahead know less than they could), a
 * rank that runs ahead (not a culprit), and the limits of what one rank alone can tell.
 */
class VerdictTest {
    private static final String ALL_REDUCE = "allReduce SUM FP32 4096 elements (16384 bytes)";
    private static final String ALL_REDUCE_SHORT = "allReduce SUM FP32 4095 elements (16380 bytes)";
    private static final String ALL_GATHER = "allGather FP32 slot 1024 elements -> 4096 (16384 bytes)";
    private static final String AT_STEP = "Trainer.step(Trainer.java:88)";
    private static final String AT_SYNC = "Trainer.step(Trainer.java:90)";

    /** A rank of {@code world} that executed {@code executed}, knows {@code completed} complete, and waits in synchronize. */
    private static RankSummary waiting(int rank, int world, long executed, long completed, Pending... pending) {
        return new RankSummary(rank, world, Status.OPEN, "", executed, completed, List.of(pending), Activity.WAIT,
                "synchronize", "jnccl-rank-" + rank, AT_SYNC, List.of("dev.jnccl.Communicator.synchronize(Communicator.java:1)"));
    }

    /** A rank in user code after {@code executed} transactions, all complete. */
    private static RankSummary inUserCode(int rank, int world, long executed) {
        return new RankSummary(rank, world, Status.OPEN, "", executed, executed, List.of(), Activity.USER_CODE, "",
                "jnccl-rank-" + rank, AT_STEP, List.of("java.base/java.lang.Thread.sleep0(Native Method)"));
    }

    private static Pending pending(long number, String... commands) {
        return new Pending(number, List.of(commands));
    }

    /** Ranks 0..world-1 waiting in transaction #41 (all-reduce), #40 complete; {@code change} replaces some. */
    private static List<RankSummary> world(int world, UnaryOperator<RankSummary> change) {
        List<RankSummary> all = new ArrayList<>();
        for (int r = 0; r < world; r++) {
            all.add(change.apply(waiting(r, world, 41, 40, pending(41, ALL_REDUCE))));
        }
        return all;
    }

    private static String verdict(List<RankSummary> summaries) {
        String verdict = Verdict.of(summaries.getFirst().worldSize(), summaries);
        // Every verdict must be a valid one: one line.
        assertEquals(verdict, new Diagnosis(verdict, summaries, true).verdict());
        return verdict;
    }

    private static String verdict(int world, List<RankSummary> summaries) {
        String verdict = Verdict.of(world, summaries);
        assertFalse(verdict.contains("\n"), verdict);
        return verdict;
    }

    @Test
    void aRankThatNeverReachedTheTransactionIsNamedWithItsLocationInUserCode() {
        List<RankSummary> all = world(4, s -> s.rank() == 2 ? inUserCode(2, 4, 40) : s);
        assertEquals("rank 2 never reached transaction #41 (it is in user code: at " + AT_STEP + ")", verdict(all));
    }

    @Test
    void theLaggardIsFoundAlthoughTheOthersProbesLag() {
        // The others last saw a probe complete at #30; the laggard, idle, knows its own exactly.
        List<RankSummary> all = world(4, s -> s.rank() == 2 ? inUserCode(2, 4, 40)
                : waiting(s.rank(), 4, 41, 30, pending(39, ALL_GATHER), pending(40, ALL_GATHER), pending(41, ALL_REDUCE)));
        assertEquals("rank 2 never reached transaction #41 (it is in user code: at " + AT_STEP + ")", verdict(all));
    }

    @Test
    void ranksThatRanAheadDoNotHideTheLaggard() {
        List<RankSummary> all = world(4, s -> switch (s.rank()) {
            case 2 -> inUserCode(2, 4, 40);
            case 0 -> waiting(0, 4, 43, 40, pending(41, ALL_REDUCE), pending(42, ALL_GATHER), pending(43, ALL_REDUCE));
            default -> s;
        });
        assertEquals("rank 2 never reached transaction #41 (it is in user code: at " + AT_STEP + ")", verdict(all));
    }

    @Test
    void aLaggardInAHostSideCallIsNamedWithTheCall() {
        List<RankSummary> all = world(3, s -> s.rank() != 1 ? s : new RankSummary(1, 3, Status.OPEN, "", 40, 40,
                List.of(), Activity.HOST_CALL, "barrier", "jnccl-rank-1", "Trainer.sync(Trainer.java:12)", List.of()));
        assertEquals("rank 1 never reached transaction #41 (it is in barrier, called at Trainer.sync(Trainer.java:12))",
                verdict(all));
    }

    @Test
    void aCountMismatchNamesTheRanksOfEachVersionAndTheValues() {
        List<RankSummary> all = world(4, s -> s.rank() == 2 ? waiting(2, 4, 41, 40, pending(41, ALL_REDUCE_SHORT)) : s);
        assertEquals("transaction #41 differs: ranks 0,1,3 " + ALL_REDUCE + ", rank 2 " + ALL_REDUCE_SHORT, verdict(all));
    }

    @Test
    void aMismatchInsideATransactionOfSeveralCommandsNamesTheCommand() {
        List<RankSummary> all = world(2, s -> waiting(s.rank(), 2, 41, 40,
                pending(41, ALL_GATHER, s.rank() == 0 ? ALL_REDUCE : ALL_REDUCE_SHORT)));
        assertEquals("transaction #41 differs at command 2: rank 0 " + ALL_REDUCE + ", rank 1 " + ALL_REDUCE_SHORT,
                verdict(all));
    }

    @Test
    void aRankWithFewerCommandsSaysItHasNothingThere() {
        List<RankSummary> all = world(3, s -> s.rank() == 1 ? waiting(1, 3, 41, 40, pending(41, ALL_GATHER))
                : waiting(s.rank(), 3, 41, 40, pending(41, ALL_GATHER, ALL_REDUCE)));
        assertEquals("transaction #41 differs at command 2: ranks 0,2 " + ALL_REDUCE + ", rank 1 nothing (1 command(s))",
                verdict(all));
    }

    @Test
    void aMismatchBeforeTheNewestPendingTransactionIsFoundWhenProbesLag() {
        List<RankSummary> all = world(2, s -> waiting(s.rank(), 2, 42, 38, pending(39, ALL_GATHER),
                pending(40, s.rank() == 1 ? ALL_REDUCE_SHORT : ALL_REDUCE), pending(41, ALL_REDUCE),
                pending(42, ALL_REDUCE)));
        assertEquals("transaction #40 differs: rank 0 " + ALL_REDUCE + ", rank 1 " + ALL_REDUCE_SHORT, verdict(all));
    }

    @Test
    void aMismatchNamesTheLargestGroupFirst() {
        List<RankSummary> all = world(4, s -> s.rank() == 0 ? waiting(0, 4, 41, 40, pending(41, ALL_REDUCE_SHORT)) : s);
        assertEquals("transaction #41 differs: ranks 1,2,3 " + ALL_REDUCE + ", rank 0 " + ALL_REDUCE_SHORT, verdict(all));
    }

    @Test
    void aRankThatClosedEarlyIsNamedWithItsCount() {
        List<RankSummary> all = world(4, s -> s.rank() != 3 ? s : new RankSummary(3, 4, Status.CLOSED, "", 40, 40,
                List.of(), Activity.ENDED, "", "jnccl-rank-3", "", List.of()));
        assertEquals("rank 3 closed its communicator after 40 transaction(s)", verdict(all));
    }

    @Test
    void aRankWhoseWorkReturnedSaysSo() {
        List<RankSummary> all = world(2, s -> s.rank() != 1 ? s
                : Diagnoses.leaving(inUserCode(1, 2, 40), "its work returned"));
        assertEquals("rank 1 closed its communicator after 40 transaction(s) (its work returned)", verdict(all));
    }

    @Test
    void aRankAbortedBeforeIsNamedWithTheFirstLineOfItsReason() {
        List<RankSummary> all = world(3, s -> s.rank() != 0 ? s : new RankSummary(0, 3, Status.ABORTED,
                "execute of transaction #41 failed: out of memory\n  more", 40, 40, List.of(), Activity.USER_CODE, "",
                "main", AT_STEP, List.of()));
        assertEquals("rank 0 was aborted after 40 transaction(s): execute of transaction #41 failed: out of memory",
                verdict(all));
    }

    @Test
    void aRankThatGaveNoSummaryIsNamed() {
        List<RankSummary> all = world(4, s -> s.rank() != 3 ? s : Diagnoses.absent(3, 4, "its process is gone"));
        assertEquals("rank 3 gave no summary: its process is gone", verdict(all));
    }

    @Test
    void everyCulpritIsNamedUpToFourThenCounted() {
        List<RankSummary> all = world(8, s -> s.rank() == 0 ? s
                : s.rank() == 7 ? Diagnoses.absent(7, 8, "its process is gone") : inUserCode(s.rank(), 8, 40));
        String verdict = verdict(all);
        assertEquals("rank 7 gave no summary: its process is gone; rank 1 never reached transaction #41 (it is in user"
                + " code: at " + AT_STEP + "); rank 2 never reached transaction #41 (it is in user code: at " + AT_STEP
                + "); rank 3 never reached transaction #41 (it is in user code: at " + AT_STEP + "); and 3 more rank(s)",
                verdict);
    }

    @Test
    void everyRankInsideTheSameTransactionBlamesNcclOrTheTransport() {
        assertEquals("every rank is inside transaction #41 with the same commands: NCCL or the transport is stuck ("
                + ALL_REDUCE + ")", verdict(world(4, s -> s)));
    }

    @Test
    void everyRankInsideSeveralTransactionsSaysWhichAreNotKnownComplete() {
        List<RankSummary> all = world(2, s -> waiting(s.rank(), 2, 41, 39, pending(40, ALL_GATHER),
                pending(41, ALL_REDUCE)));
        assertEquals("every rank is inside transactions #40 to #41 (none known complete) with the same commands: NCCL"
                + " or the transport is stuck (" + ALL_GATHER + ")", verdict(all));
    }

    @Test
    void aRankRunningAheadIsNoCulpritWhenEveryRankIsStuckInTheSameTransaction() {
        // Rank 0 enqueues #42 while #41 hangs everywhere: it is not held, it merely ran ahead.
        List<RankSummary> all = world(3, s -> s.rank() != 0 ? s : new RankSummary(0, 3, Status.OPEN, "", 42, 40,
                List.of(pending(41, ALL_REDUCE)), Activity.ENQUEUE, "execute", "jnccl-rank-0", AT_STEP, List.of()));
        assertEquals("every rank is inside transaction #41 with the same commands: NCCL or the transport is stuck ("
                + ALL_REDUCE + ")", verdict(all));
    }

    @Test
    void aRankHeldInsideTheEnqueueOfTheStuckTransactionIsNamed() {
        // Counted as executed, not yet in its flight recorder: NCCL has not returned from its enqueue.
        List<RankSummary> all = world(3, s -> s.rank() != 1 ? s : new RankSummary(1, 3, Status.OPEN, "", 41, 40,
                List.of(), Activity.ENQUEUE, "execute", "jnccl-rank-1", AT_STEP, List.of()));
        assertEquals("rank 1 is held inside the enqueue of transaction #41 while the other ranks wait: NCCL or the"
                + " transport does not return on it", verdict(all));
    }

    @Test
    void theOnlyRankOfAWorldOfOne() {
        List<RankSummary> one = List.of(waiting(0, 1, 3, 2, pending(3, ALL_REDUCE)));
        assertEquals("the only rank is inside transaction #3: NCCL or the transport is stuck (" + ALL_REDUCE + ")",
                verdict(one));
    }

    @Test
    void aRankMissingFromTheBarrierTheOthersAreInIsNamed() {
        List<RankSummary> all = new ArrayList<>();
        for (int r = 0; r < 4; r++) {
            all.add(r == 2 ? inUserCode(2, 4, 5) : new RankSummary(r, 4, Status.OPEN, "", 5, 5, List.of(),
                    Activity.HOST_CALL, "barrier", "jnccl-rank-" + r, "Trainer.sync(Trainer.java:12)", List.of()));
        }
        assertEquals("rank 2 never reached barrier (it is in user code: at " + AT_STEP + ")", verdict(all));
    }

    /** Threads mode's copy engines: the ranks meet inside execute before their transaction is counted. */
    @Test
    void aRankMissingFromTheExecuteTheOthersWaitInIsNamedWithTheTransaction() {
        List<RankSummary> all = new ArrayList<>();
        for (int r = 0; r < 4; r++) {
            all.add(r == 1 ? inUserCode(1, 4, 7) : new RankSummary(r, 4, Status.OPEN, "", 7, 7, List.of(),
                    Activity.ENQUEUE, "execute", "jnccl-rank-" + r, "Trainer.step(Trainer.java:70)", List.of()));
        }
        assertEquals("rank 1 never reached transaction #8 (it is in user code: at " + AT_STEP + ")", verdict(all));
    }

    @Test
    void everyRankInTheSameHostSideCallBlamesTheHostSide() {
        List<RankSummary> all = new ArrayList<>();
        for (int r = 0; r < 2; r++) {
            all.add(new RankSummary(r, 2, Status.OPEN, "", 5, 5, List.of(), Activity.HOST_CALL, "allGatherBytesHost",
                    "t", "", List.of()));
        }
        assertEquals("every rank is in allGatherBytesHost after 5 transaction(s): the host side is stuck", verdict(all));
    }

    @Test
    void aRankBehindWithNothingPendingAnywhereIsNamed() {
        List<RankSummary> all = List.of(inUserCode(0, 3, 5), inUserCode(1, 3, 3), inUserCode(2, 3, 5));
        assertEquals("rank 1 never reached transaction #4 (it is in user code: at " + AT_STEP + ")", verdict(all));
    }

    @Test
    void noCulpritIsSaidWhenThereIsNone() {
        List<RankSummary> all = List.of(inUserCode(0, 2, 5), inUserCode(1, 2, 5));
        assertEquals("no culprit in the summaries: every rank executed 5 transaction(s), none is pending and none is in"
                + " a host-side call", verdict(all));
    }

    @Test
    void oneRanksOwnViewSaysSo() {
        String pendingView = verdict(4, List.of(waiting(1, 4, 41, 40, pending(41, ALL_REDUCE))));
        assertEquals("rank 1's view only (no channel to the other ranks): transaction #41 is not complete ("
                + ALL_REDUCE + "); it waits in synchronize, called at " + AT_SYNC, pendingView);
        String idleView = verdict(4, List.of(inUserCode(0, 4, 7)));
        assertEquals("rank 0's view only (no channel to the other ranks): it executed 7 transaction(s), none pending;"
                + " it is in user code: at " + AT_STEP, idleView);
    }

    @Test
    void whatEachActivityReadsLike() {
        RankSummary base = inUserCode(0, 1, 1);
        assertEquals("it is in user code", Verdict.doing(copy(base, Activity.USER_CODE, "", "")));
        assertEquals("it is enqueuing a transaction in execute, called at X.y(X.java:1)",
                Verdict.doing(copy(base, Activity.ENQUEUE, "execute", "X.y(X.java:1)")));
        assertEquals("it is closing its communicator", Verdict.doing(copy(base, Activity.CLOSE, "close", "")));
        assertEquals("its thread has ended", Verdict.doing(copy(base, Activity.ENDED, "", "")));
        assertEquals("what its thread does is unknown", Verdict.doing(copy(base, Activity.UNKNOWN, "", "")));
    }

    private static RankSummary copy(RankSummary s, Activity activity, String call, String location) {
        return new RankSummary(s.rank(), s.worldSize(), s.status(), s.detail(), s.executed(), s.completed(), s.pending(),
                activity, call, s.thread(), location, s.stack());
    }

    @Test
    void noSummaryAtAllIsRefused() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Verdict.of(2, List.of()));
        assertEquals("Verdict: no summary", e.getMessage());
    }

    @Test
    void summariesAndDiagnosesCheckWhatTheyHold() {
        IllegalArgumentException rank = assertThrows(IllegalArgumentException.class,
                () -> inUserCode(4, 4, 1));
        assertEquals("RankSummary: rank 4 is outside [0, 4)", rank.getMessage());
        IllegalArgumentException twoLines = assertThrows(IllegalArgumentException.class,
                () -> new Diagnosis("a\nb", List.of(), true));
        assertEquals("Diagnosis: the verdict must be one non-blank line, got \"a\nb\"", twoLines.getMessage());
        List<Pending> mutable = new ArrayList<>(List.of(pending(1, ALL_REDUCE)));
        RankSummary summary = waiting(0, 1, 1, 0, mutable.toArray(Pending[]::new));
        mutable.clear();
        assertEquals(1, summary.pending().size());
        assertThrows(UnsupportedOperationException.class, () -> summary.pending().clear());
    }

    @Test
    void theVerdictLeadsAReasonOnce() {
        Diagnosis diagnosis = new Diagnosis("rank 2 never reached transaction #41", List.of(), true);
        String reason = Diagnoses.lead(diagnosis, "watchdog: transaction #41 not complete after 2000 ms");
        assertEquals("rank 2 never reached transaction #41\nwatchdog: transaction #41 not complete after 2000 ms", reason);
        assertEquals(reason, Diagnoses.lead(diagnosis, reason));
        assertEquals("rank 2 never reached transaction #41\nrank 0 failed: CommunicatorAbortedException: communicator of"
                + " rank 0 aborted: watchdog: x", Diagnoses.lead(diagnosis, "rank 0 failed: CommunicatorAbortedException:"
                + " communicator of rank 0 aborted: rank 2 never reached transaction #41\nwatchdog: x"));
        assertEquals("no diagnosis", Diagnoses.lead(null, "no diagnosis"));
    }

    @Test
    void userCodeIsNeitherTheJdksNorJncclsModules() {
        assertTrue(Forensics.isUserCode("com.example.Trainer"));
        assertTrue(Forensics.isUserCode("dev.jnccl.it.ThreadsDiagnosisTest"));
        assertTrue(Forensics.isUserCode("dev.jnccl.examples.Zero3"));
        assertFalse(Forensics.isUserCode("dev.jnccl.Communicator"));
        assertFalse(Forensics.isUserCode("dev.jnccl.threads.PackState"));
        assertFalse(Forensics.isUserCode("dev.jnccl.mpi.internal.MpiLibrary"));
        assertFalse(Forensics.isUserCode("java.lang.Thread"));
        assertFalse(Forensics.isUserCode("jdk.internal.misc.Unsafe"));
        StackTraceElement[] frames = {
            new StackTraceElement("java.lang.Thread", "sleep0", null, -2),
            new StackTraceElement("dev.jnccl.Communicator", "barrier", "Communicator.java", 700),
            new StackTraceElement("com.example.Trainer", "step", "Trainer.java", 88),
            new StackTraceElement("com.example.Main", "main", "Main.java", 3)};
        assertEquals(AT_STEP, Forensics.location(frames, 0));
        assertEquals("Main.main(Main.java:3)", Forensics.location(frames, 3));
        assertEquals("", Forensics.location(new StackTraceElement[] {frames[0]}, 0));
    }
}
