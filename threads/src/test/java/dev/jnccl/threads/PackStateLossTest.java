package dev.jnccl.threads;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.Diagnosis;
import dev.jnccl.JncclException;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The pack going on without lost ranks ({@link PackState#lose}, the state behind
 * {@link ThreadsOptions#withContinueWithoutFailedRanks}), with plain threads as ranks: who is
 * released, who is still waited for, when the pack fails after all.
 */
class PackStateLossTest {
    private static final Duration DRAIN = Duration.ofSeconds(1);
    private static final long LONG_NANOS = TimeUnit.SECONDS.toNanos(30);

    @Test
    void withoutAMinimumWorldALossFailsThePackAsBefore() {
        PackState pack = new PackState(3, DRAIN);
        IllegalStateException error = new IllegalStateException("boom");
        assertTrue(pack.lose(1, error));
        assertSame(error, pack.failure().error());
        assertEquals(1, pack.failure().rank());
        assertEquals(List.of(), pack.lostRanks(), "off: nothing is lost, the pack failed");
        assertFalse(pack.abortedForLoss());
    }

    @Test
    void ranksInAHostSideCallAreReleasedByALossAndTheSurvivorsFinishWithoutTheLostRank() throws Exception {
        PackState pack = new PackState(4, DRAIN, 2);
        RankThreads inBarrier = RankThreads.start(4, rank -> {
            pack.barrier("barrier", rank, LONG_NANOS);
            return null;
        }, 0, 1, 2);
        for (int rank = 0; rank < 3; rank++) {
            RankThreads.awaitWaiting(inBarrier.thread(rank));
        }
        IllegalStateException error = new IllegalStateException("rank 3's work threw");
        assertTrue(pack.lose(3, error));
        assertFalse(pack.lose(3, error), "a rank is lost once");
        inBarrier.join();
        for (int rank = 0; rank < 3; rank++) {
            CommunicatorAbortedException released = assertInstanceOf(CommunicatorAbortedException.class,
                    inBarrier.error(rank), "rank " + rank);
            assertTrue(released.getMessage().contains("ranks [3] were lost"), released.getMessage());
            assertSame(error, released.getCause());
        }
        assertNull(pack.failure(), "a loss above the minimum world does not fail the pack");
        assertTrue(pack.abortedForLoss());
        assertEquals(List.of(3), pack.lostRanks());
        assertEquals(Map.of(3, error), pack.lostErrors());

        RankThreads finishing = RankThreads.start(4, rank -> {
            pack.finish(rank);
            return null;
        }, 0, 1, 2).join();
        for (int rank = 0; rank < 3; rank++) {
            finishing.assertNoError(rank);
        }
    }

    @Test
    void survivorsWaitingAtTheEndOfTheirWorkAreNotReleasedButFinishWhenTheLastMissingRankIsLost() throws Exception {
        PackState pack = new PackState(3, DRAIN, 1);
        RankThreads finishing = RankThreads.start(3, rank -> {
            pack.finish(rank);
            return null;
        }, 0, 1);
        RankThreads.awaitWaiting(finishing.thread(0));
        RankThreads.awaitWaiting(finishing.thread(1));
        pack.lose(2, new IllegalStateException("rank 2 threw"));
        finishing.join();
        finishing.assertNoError(0);
        finishing.assertNoError(1);
        assertNull(pack.failure());
    }

    @Test
    void aLossBelowTheMinimumWorldFailsThePackNamingEveryLostRank() {
        PackState pack = new PackState(4, DRAIN, 3);
        IllegalStateException first = new IllegalStateException("first");
        IllegalStateException second = new IllegalStateException("second");
        assertTrue(pack.lose(0, first));
        assertNull(pack.failure());
        assertTrue(pack.lose(2, second));
        PackState.Failure failed = pack.failure();
        assertNotNull(failed, "2 of 4 ranks remain, fewer than 3");
        assertEquals(2, failed.rank());
        JncclException error = assertInstanceOf(JncclException.class, failed.error());
        assertTrue(error.getMessage().contains("ranks [0, 2] are lost: 2 of 4 ranks remain, fewer than"
                + " ThreadsOptions.minWorld 3"), error.getMessage());
        assertSame(second, error.getCause());
        assertSame(first, error.getSuppressed()[0]);
        assertFalse(pack.abortedForLoss(), "the pack failed: aborts fail it as before");
    }

    @Test
    void anInterruptedWaiterIsLostAndKeepsItsInterrupt() throws Exception {
        PackState pack = new PackState(3, DRAIN, 2);
        RankThreads waiting = RankThreads.start(3, rank -> {
            pack.barrier("barrier", rank, LONG_NANOS);
            return null;
        }, 0);
        RankThreads.awaitWaiting(waiting.thread(0));
        waiting.thread(0).interrupt();
        waiting.join();
        assertInstanceOf(CommunicatorAbortedException.class, waiting.error(0));
        assertTrue(waiting.interruptedAfter(0));
        assertEquals(List.of(0), pack.lostRanks());
        assertNull(pack.failure());
    }

    @Test
    void aRankHeldInTheThrottleByALostRankIsReleased() throws Exception {
        PackState pack = new PackState(2, DRAIN, 1);
        RankThreads ahead = RankThreads.start(2, rank -> {
            for (long sequence = 1; sequence <= 5; sequence++) {
                pack.throttle(rank, sequence, 2, LONG_NANOS);
            }
            return null;
        }, 0);
        RankThreads.awaitWaiting(ahead.thread(0));
        pack.lose(1, new IllegalStateException("rank 1 threw"));
        ahead.join();
        CommunicatorAbortedException released = assertInstanceOf(CommunicatorAbortedException.class, ahead.error(0));
        assertTrue(released.getMessage().contains("transaction throttle on rank 0 released: ranks [1] were lost"),
                released.getMessage());
        assertNull(pack.failure());
    }

    @Test
    void aSurvivorsPackLosesALaterLostMemberAndFailsWithTheRootBelowTheMinimum() {
        PackState pack = new PackState(4, DRAIN, 2);
        pack.lose(0, new IllegalStateException("rank 0 threw"));
        PackState survivors = pack.survivors(1, List.of(1, 2, 3));
        IllegalStateException second = new IllegalStateException("rank 2 threw");
        assertTrue(pack.lose(2, second));
        assertEquals(List.of(1), survivors.lostRanks(), "old rank 2 is rank 1 of the survivors");
        assertNull(survivors.failure());
        assertTrue(pack.lose(3, new IllegalStateException("rank 3 threw")), "1 of 4 left: below 2");
        assertNotNull(pack.failure());
        assertNotNull(survivors.failure(), "the root's failure reaches the survivors' pack");
    }

    @Test
    void aHangDiagnosedAsRanksThatNeverReachedTheCallLosesThemAndInterruptsTheirWork() throws Exception {
        PackState pack = new PackState(3, DRAIN, 2);
        RankThreads hung = RankThreads.start(3, rank -> {
            pack.working(rank, true);
            Thread.sleep(TimeUnit.SECONDS.toMillis(30)); // stands for user code that hangs
            return null;
        }, 2);
        RankThreads.awaitWaiting(hung.thread(0)); // the only thread started: rank 2's
        Diagnosis verdict = new Diagnosis("rank 2 never reached transaction #7 (it is in user code: at X.y(X.java:1))",
                List.of(), true);
        assertFalse(pack.loseHung(2, verdict), "the reporter itself is never the one lost");
        assertTrue(pack.loseHung(0, verdict));
        hung.join();
        assertInstanceOf(InterruptedException.class, hung.error(2));
        assertEquals(List.of(2), pack.lostRanks());
        assertTrue(pack.lostErrors().get(2).getMessage().contains("rank 2 hung and was interrupted: rank 2 never reached"));
        assertNull(pack.failure());
    }

    @Test
    void aRankNamedByAHangVerdictThatWaitsInACallOfASplitIsNotLostTheHungOneIs() throws Exception {
        PackState pack = new PackState(4, DRAIN, 2);
        PackState pair = pack.child(1, 0, List.of(1, 2));
        RankThreads ranks = RankThreads.start(4, rank -> {
            pack.working(rank, true);
            if (rank == 1) {
                Thread.sleep(TimeUnit.SECONDS.toMillis(30)); // stands for user code that hangs
            } else {
                pair.barrier("barrier", 1, LONG_NANOS); // rank 2 waits for it in their split's barrier
            }
            return null;
        }, 1, 2);
        RankThreads.awaitWaiting(ranks.thread(0));
        RankThreads.awaitWaiting(ranks.thread(1));
        // The root's verdict names both: rank 2 never reached the root's call because it waits in the split's.
        Diagnosis verdict = new Diagnosis("rank 1 never reached transaction #3 (it is in user code: at X.y(X.java:1));"
                + " rank 2 never reached transaction #3 (it is in user code: at X.z(X.java:2))", List.of(), true);
        assertTrue(pack.loseHung(0, verdict));
        ranks.join();
        assertEquals(List.of(1), pack.lostRanks(), "rank 2 waits in a jnccl call: not hung itself");
        assertInstanceOf(InterruptedException.class, ranks.error(1));
        assertEquals(List.of(0), pair.lostRanks(), "the split lost rank 1 in its numbering");
        CommunicatorAbortedException released = assertInstanceOf(CommunicatorAbortedException.class, ranks.error(2));
        assertTrue(released.getMessage().contains("ranks [0] were lost"), released.getMessage());
        assertNull(pack.failure());
    }

    @Test
    void onlyVerdictsOfRanksThatNeverReachedTheCallNameRanksToLose() {
        assertEquals(List.of(1, 3), PackState.neverReached("rank 1 never reached transaction #4 (idle); rank 3 never"
                + " reached transaction #4 (it is in user code: at A.b(A.java:2))"));
        assertEquals(List.of(), PackState.neverReached("rank 1 never reached barrier (x); rank 2 gave no summary: gone"));
        assertEquals(List.of(), PackState.neverReached("transaction #3 differs: ranks 0,1 allReduce ..., rank 2 ..."));
        assertFalse(new PackState(3, DRAIN).loseHung(0, new Diagnosis("rank 2 never reached transaction #1 (x)",
                List.of(), true)), "off without a minimum world");
    }

    @Test
    void aSplitLosesTheRankInItsOwnNumberingAndItsFailureThenDoesNotFailThePack() {
        PackState pack = new PackState(4, DRAIN, 2);
        PackState odd = pack.child(1, 1, List.of(1, 3));
        PackState even = pack.child(1, 0, List.of(0, 2));
        pack.lose(3, new IllegalStateException("rank 3 threw"));
        assertEquals(List.of(1), odd.lostRanks(), "rank 3 is rank 1 of the split");
        assertEquals(List.of(), even.lostRanks());
        even.fail(0, new CommunicatorAbortedException("the communicator it was split from was aborted"));
        assertNull(pack.failure(), "a split's abort that follows the loss does not fail the pack");
        assertEquals(List.of(3), pack.lostRanks());
    }
}
