package dev.jnccl.threads;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.Diagnosis;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * The pack's shared state on its own, with plain threads as ranks (no communicator, no device):
 * the barrier and its failures (a rank that never comes, an interrupt, ranks in different
 * host-side calls), the exchange, the launch-queue throttle, and what a failure does to the ranks'
 * threads.
 */
class PackStateTest {
    private static final Duration DRAIN = Duration.ofSeconds(1);
    /** A limit no wait of a passing test reaches: each wait still has a deadline. */
    private static final long LONG_NANOS = TimeUnit.SECONDS.toNanos(30);
    private static final long SHORT_MS = 400;
    private static final long SHORT_NANOS = TimeUnit.MILLISECONDS.toNanos(SHORT_MS);
    private static final String SAME_CALLS = ": in threads mode every rank must make the same host-side calls"
            + " (barrier, host gathers, memcpy-mode transactions) in the same order";

    /** Ranks {@code ranks} of {@code pack}, each on its own thread in one barrier. */
    private static RankThreads inBarrier(PackState pack, long timeoutNanos, int... ranks) {
        return RankThreads.start(pack.size(), rank -> {
            pack.barrier("barrier", rank, timeoutNanos);
            return null;
        }, ranks);
    }

    @Test
    void aBarrierReleasesNoRankBeforeAllHaveArrived() throws Exception {
        int size = 4;
        int rounds = 5;
        PackState pack = new PackState(size, DRAIN);
        AtomicInteger arrivals = new AtomicInteger();
        RankThreads ranks = RankThreads.start(size, rank -> {
            List<Integer> seen = new ArrayList<>();
            for (int round = 0; round < rounds; round++) {
                arrivals.incrementAndGet();
                pack.barrier("barrier", rank, LONG_NANOS);
                seen.add(arrivals.get());
            }
            return seen;
        }, 0, 1, 2, 3).join();
        for (int rank = 0; rank < size; rank++) {
            ranks.assertNoError(rank);
            @SuppressWarnings("unchecked")
            List<Integer> seen = (List<Integer>) ranks.result(rank);
            for (int round = 0; round < rounds; round++) {
                // Out of round r only after every rank came into it; nobody gets past round r + 1 before this rank does.
                int arrivalsThen = seen.get(round);
                assertTrue(arrivalsThen >= (round + 1) * size && arrivalsThen <= (round + 2) * size,
                        "rank " + rank + " left round " + round + " after " + arrivalsThen + " arrivals");
            }
        }
        assertNull(pack.failure());
        assertNull(pack.cancellation());
    }

    @Test
    void aRankThatNeverArrivesFailsTheBarrierAfterItsTimeoutNamingThatRank() throws Exception {
        PackState pack = new PackState(3, DRAIN);
        long start = System.nanoTime();
        RankThreads ranks = inBarrier(pack, SHORT_NANOS, 0, 1).join();
        long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        assertTrue(elapsedMs >= SHORT_MS, "ended after " + elapsedMs + " ms");

        PackState.Failure failure = pack.failure();
        assertNotNull(failure, "the pack did not fail");
        int failed = failure.rank();
        assertTrue(failed == 0 || failed == 1, "failed rank " + failed);
        assertInstanceOf(CommunicatorAbortedException.class, failure.error());
        assertEquals("barrier on rank " + failed + ": rank 2 did not arrive within " + SHORT_MS + " ms",
                failure.error().getMessage());
        assertEquals("rank " + failed + " failed: " + failure.error(), pack.cancellation());
        for (int rank = 0; rank < 2; rank++) {
            CommunicatorAbortedException e = assertInstanceOf(CommunicatorAbortedException.class, ranks.error(rank));
            // The other rank either timed out on its own as well or was released by the first one's failure.
            String own = "barrier on rank " + rank + ": rank 2 did not arrive within " + SHORT_MS + " ms";
            String released = "barrier on rank " + rank + " released: " + pack.cancellation();
            assertTrue(e.getMessage().equals(own) || (rank != failed && e.getMessage().equals(released)),
                    "rank " + rank + ": " + e.getMessage());
        }
        // Later calls fail at once, naming the first failure.
        assertEquals("barrier on rank 2 released: " + pack.cancellation(), assertThrows(
                CommunicatorAbortedException.class, () -> pack.barrier("barrier", 2, LONG_NANOS)).getMessage());
    }

    @Test
    void anInterruptedWaiterFailsThePackKeepsItsInterruptAndReleasesTheOthers() throws Exception {
        PackState pack = new PackState(3, DRAIN);
        RankThreads ranks = inBarrier(pack, LONG_NANOS, 0, 1);
        RankThreads.awaitWaiting(ranks.thread(0));
        RankThreads.awaitWaiting(ranks.thread(1));
        ranks.thread(1).interrupt();
        ranks.join();

        CommunicatorAbortedException interrupted = assertInstanceOf(CommunicatorAbortedException.class,
                ranks.error(1));
        assertEquals("barrier on rank 1 was interrupted while rank 2 had not arrived", interrupted.getMessage());
        assertInstanceOf(InterruptedException.class, interrupted.getCause());
        assertTrue(ranks.interruptedAfter(1), "rank 1 lost its interrupt status");

        assertEquals(1, pack.failure().rank());
        assertEquals("barrier on rank 0 released: rank 1 failed: " + interrupted, ranks.error(0).getMessage());
        assertFalse(ranks.interruptedAfter(0), "rank 0 was interrupted although it was not in its work");
    }

    @Test
    void ranksInDifferentHostSideCallsFailWithTheMismatch() throws Exception {
        PackState pack = new PackState(2, DRAIN);
        assertMismatchReleasesTheRankInTheBarrier(pack, IllegalStateException.class,
                () -> pack.barrier("execute", 1, LONG_NANOS), "rank 1 is in execute while rank 0 is in barrier");
    }

    /**
     * Rank 0 waits in a barrier of {@code pack} (size 2) when rank 1 arrives in another call
     * ({@code arrival}): that throws {@code type} saying {@code mismatch} (then {@link #SAME_CALLS}),
     * which fails the pack, and rank 0 is released naming it.
     */
    private static void assertMismatchReleasesTheRankInTheBarrier(PackState pack, Class<? extends RuntimeException> type,
                                                                  Executable arrival, String mismatch) throws Exception {
        RankThreads waiting = inBarrier(pack, LONG_NANOS, 0);
        RankThreads.awaitWaiting(waiting.thread(0));
        RuntimeException e = assertThrows(type, arrival);
        assertEquals(mismatch + SAME_CALLS, e.getMessage());
        waiting.join();

        assertEquals(1, pack.failure().rank());
        assertEquals("barrier on rank 0 released: rank 1 failed: " + e, waiting.error(0).getMessage());
        assertInstanceOf(CommunicatorAbortedException.class, waiting.error(0));
    }

    @Test
    void exchangeGivesEveryRankEveryValueInRankOrder() throws Exception {
        int size = 4;
        int rounds = 6;
        long[][] values = new long[rounds][size];
        Random random = new Random();
        for (long[] round : values) {
            for (int rank = 0; rank < size; rank++) {
                round[rank] = random.nextLong();
            }
        }
        PackState pack = new PackState(size, DRAIN);
        RankThreads ranks = RankThreads.start(size, rank -> {
            List<List<Long>> got = new ArrayList<>();
            for (int round = 0; round < rounds; round++) {
                got.add(pack.exchange("allGatherBytesHost", rank, values[round][rank], LONG_NANOS));
            }
            return got;
        }, 0, 1, 2, 3).join();
        for (int rank = 0; rank < size; rank++) {
            ranks.assertNoError(rank);
            @SuppressWarnings("unchecked")
            List<List<Long>> got = (List<List<Long>>) ranks.result(rank);
            for (int round = 0; round < rounds; round++) {
                assertEquals(size, got.get(round).size());
                for (int from = 0; from < size; from++) {
                    assertEquals(values[round][from], got.get(round).get(from),
                            "rank " + rank + ", round " + round + ", value of rank " + from);
                }
            }
        }
        assertNull(pack.failure());
    }

    @Test
    void aRankTooFarAheadWaitsUntilTheSlowestCatchesUp() throws Exception {
        int maxLead = 2;
        PackState pack = new PackState(2, DRAIN);
        pack.throttle(1, 1, maxLead, LONG_NANOS);
        CountDownLatch withinLead = new CountDownLatch(1);
        RankThreads ahead = RankThreads.start(2, rank -> {
            for (long sequence = 1; sequence <= maxLead + 1; sequence++) {
                pack.throttle(rank, sequence, maxLead, LONG_NANOS); // rank 1 is at #1: up to #3 is within the lead
            }
            withinLead.countDown();
            pack.throttle(rank, maxLead + 2, maxLead, LONG_NANOS); // #4: three ahead of rank 1
            return System.nanoTime();
        }, 0);
        assertTrue(withinLead.await(RankThreads.SOON_MS, TimeUnit.MILLISECONDS), "rank 0 waited within its lead");
        RankThreads.awaitWaiting(ahead.thread(0));
        Thread.sleep(SHORT_MS);
        assertTrue(ahead.thread(0).isAlive(), "rank 0 ran " + (maxLead + 1) + " transactions ahead");
        long caughtUp = System.nanoTime();
        pack.throttle(1, 2, maxLead, LONG_NANOS);
        ahead.join();
        ahead.assertNoError(0);
        assertTrue((long) ahead.result(0) >= caughtUp, "rank 0 went on before rank 1 caught up");
        assertNull(pack.failure());
    }

    @Test
    void aRankWhoseWorkReturnedIsNamedWithTheTransactionsItStartedAndHoldsNobodyBack() throws Exception {
        PackState pack = new PackState(2, DRAIN);
        long started = 1 + new Random().nextInt(20);
        for (long sequence = 1; sequence <= started; sequence++) {
            pack.throttle(1, sequence, (int) started, LONG_NANOS);
        }
        assertNull(pack.closedBefore(0, started + 1, LONG_NANOS), "rank 1 is still in its work");
        RankThreads returned = RankThreads.start(2, rank -> {
            pack.finish(rank);
            return null;
        }, 1);
        RankThreads.awaitWaiting(returned.thread(0));

        assertNull(pack.closedBefore(0, started, LONG_NANOS), "rank 0 executed no more than rank 1");
        assertEquals("rank 1 closed its communicator after " + started + " transaction(s) while this rank executed "
                + (started + 2) + " and has waited 1500 ms for the last ones: they wait for a rank that will not join"
                + " them (its work returned; the launcher closes its communicator)",
                pack.closedBefore(0, started + 2, TimeUnit.MILLISECONDS.toNanos(1500)));
        assertNull(pack.closedBefore(1, started + 2, LONG_NANOS), "a rank is never behind itself");
        // Far ahead of rank 1's count with a lead of 1: a rank whose work returned starts no more.
        for (long sequence = 1; sequence <= started + 5; sequence++) {
            pack.throttle(0, sequence, 1, SHORT_NANOS);
        }
        pack.finish(0);
        returned.join();
        returned.assertNoError(1);
        assertNull(pack.failure());
    }

    @Test
    void aRankInAHostSideCallIsReleasedByAPeerWhoseWorkReturnedFirst() throws Exception {
        PackState pack = new PackState(2, DRAIN);
        assertMismatchReleasesTheRankInTheBarrier(pack, CommunicatorAbortedException.class, () -> pack.finish(1),
                "rank 1 returned from its work while rank 0 is in barrier and waits for it");
    }

    @Test
    void aRankEnteringAHostSideCallAfterAPeersWorkReturnedFailsAtOnce() throws Exception {
        PackState pack = new PackState(2, DRAIN);
        RankThreads returned = RankThreads.start(2, rank -> {
            pack.finish(rank);
            return null;
        }, 1);
        RankThreads.awaitWaiting(returned.thread(0));
        CommunicatorAbortedException e = assertThrows(CommunicatorAbortedException.class,
                () -> pack.exchange("allGatherBytesHost", 0, new byte[] {1}, LONG_NANOS));
        assertEquals("rank 1 returned from its work while rank 0 is in allGatherBytesHost and waits for it"
                + SAME_CALLS, e.getMessage());
        returned.join();

        assertEquals(0, pack.failure().rank());
        assertEquals("finish on rank 1 released: rank 0 failed: " + e, returned.error(1).getMessage());
    }

    @Test
    void aThrottleThatWaitsTooLongFailsThePackNamingTheSlowestRank() {
        PackState pack = new PackState(3, DRAIN);
        pack.throttle(2, 1, 1, LONG_NANOS);
        pack.throttle(0, 1, 1, LONG_NANOS);
        long start = System.nanoTime();
        CommunicatorAbortedException e = assertThrows(CommunicatorAbortedException.class,
                () -> pack.throttle(0, 2, 1, SHORT_NANOS));
        long elapsedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
        assertTrue(elapsedMs >= SHORT_MS && elapsedMs < RankThreads.SOON_MS, "waited " + elapsedMs + " ms");
        Matcher message = Pattern.compile("transaction #2 of rank 0 waited (\\d+) ms for rank 1 \\(at transaction #0\\)"
                + " to come within ThreadsOptions.maxLead 1").matcher(e.getMessage());
        assertTrue(message.matches(), e.getMessage());
        assertTrue(Long.parseLong(message.group(1)) >= SHORT_MS, e.getMessage());
        assertEquals(0, pack.failure().rank());
        assertEquals("transaction throttle on rank 2 released: rank 0 failed: " + e, assertThrows(
                CommunicatorAbortedException.class, () -> pack.throttle(2, 2, 1, LONG_NANOS)).getMessage());
    }

    @Test
    void aRankThatIsDoneNeverHoldsTheOthersBack() {
        PackState pack = new PackState(2, DRAIN);
        pack.finished(1);
        for (long sequence = 1; sequence <= 20; sequence++) {
            pack.throttle(0, sequence, 1, SHORT_NANOS);
        }
        assertNull(pack.failure());
    }

    @Test
    void aFailureOfThePacksOwnerNamesNoRank() throws Exception {
        PackState pack = new PackState(2, DRAIN);
        RankThreads ranks = inBarrier(pack, LONG_NANOS, 0);
        RankThreads.awaitWaiting(ranks.thread(0));
        assertTrue(pack.fail(-1, new IllegalStateException("the pack was closed")));
        assertFalse(pack.fail(1, new IllegalStateException("later")), "a second failure replaced the first");
        ranks.join();

        assertEquals("the pack was closed", pack.cancellation());
        assertEquals("barrier on rank 0 released: the pack was closed", ranks.error(0).getMessage());
        String throttle = assertThrows(CommunicatorAbortedException.class,
                () -> pack.throttle(1, 1, 1, LONG_NANOS)).getMessage();
        assertEquals("transaction throttle on rank 1 released: the pack was closed", throttle);
        assertFalse(ranks.error(0).getMessage().contains("rank -1"));
        assertFalse(throttle.contains("rank -1"));
    }

    @Test
    void aFailureInterruptsTheRanksStillInTheirWorkOnly() throws Exception {
        PackState pack = new PackState(3, DRAIN);
        CountDownLatch ready = new CountDownLatch(2);
        CountDownLatch go = new CountDownLatch(1);
        RankThreads ranks = RankThreads.start(3, rank -> {
            pack.working(rank, true);
            if (rank == 1) {
                boolean failedMeanwhile = pack.working(rank, false); // done with its work, e.g. closing
                ready.countDown();
                go.await(RankThreads.SOON_MS, TimeUnit.MILLISECONDS); // throws if interrupted
                return failedMeanwhile;
            }
            ready.countDown();
            try {
                Thread.sleep(TimeUnit.SECONDS.toMillis(30)); // user code waiting for a peer outside jnccl
                return "not interrupted";
            } catch (InterruptedException e) {
                return pack.working(rank, false);
            }
        }, 0, 1);
        assertTrue(ready.await(RankThreads.SOON_MS, TimeUnit.MILLISECONDS));
        RankThreads.awaitWaiting(ranks.thread(0));

        pack.working(2, true);
        long failedAt = System.nanoTime();
        pack.fail(2, new IllegalStateException("boom"));
        assertFalse(Thread.interrupted(), "the failing rank interrupted itself");
        assertTrue(pack.working(2, false));
        ranks.thread(0).join(RankThreads.SOON_MS);
        assertFalse(ranks.thread(0).isAlive(), "rank 0 was not interrupted");
        assertTrue(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - failedAt) < RankThreads.SOON_MS);
        go.countDown();
        ranks.join();
        ranks.assertNoError(0);
        ranks.assertNoError(1);
        assertEquals(true, ranks.result(0), "working(0, false) after the failure said the pack had not failed");
        assertEquals(false, ranks.result(1), "working(1, false) before the failure said the pack had failed");
        assertFalse(ranks.interruptedAfter(1), "rank 1 was interrupted after it left its work");
    }

    @Test
    void aSplitsFailureNamesTheRankAsTheWholePackKnowsIt() throws Exception {
        PackState pack = new PackState(4, DRAIN);
        PackState split = pack.child(0, 7, List.of(1, 3));
        assertTrue(split.isChild());
        assertEquals(2, split.size());
        assertEquals(split, pack.child(0, 7, List.of(1, 3)), "members of one color got different packs");
        CommunicatorAbortedException e = assertThrows(CommunicatorAbortedException.class,
                () -> split.barrier("barrier", 1, TimeUnit.MILLISECONDS.toNanos(50)));
        assertEquals("barrier on rank 3 (rank 1 of a split): rank 0 of the split did not arrive within 50 ms",
                e.getMessage());
        assertEquals(3, pack.failure().rank(), "the split's failure did not fail the whole pack as rank 3");
        assertEquals("rank 3 (rank 1 of a split) failed: " + e, pack.cancellation());
        assertEquals(pack.cancellation(), split.cancellation());
        // A split made after the failure starts failed.
        assertEquals(pack.cancellation(), pack.child(1, 0, List.of(0, 2)).cancellation());
    }

    /**
     * The pack keeps the first diagnosis of its failure: a later one is not kept, and every reason and
     * release of the failure starts with its verdict (once), also in a pack split from it.
     */
    @Test
    void theFirstDiagnosisStandsAndLeadsEveryReasonOfThePacksFailure() {
        PackState pack = new PackState(3, DRAIN);
        Diagnosis first = new Diagnosis("rank 2 never reached transaction #5 (it is in user code)", List.of(), false);
        Diagnosis later = new Diagnosis("rank 1 never reached transaction #5 (it is in user code)", List.of(), false);
        assertNull(pack.diagnosis());
        assertSame(first, pack.diagnosed(first));
        assertSame(first, pack.diagnosed(later));
        assertSame(first, pack.diagnosed(null));
        pack.fail(0, new CommunicatorAbortedException("communicator of rank 0 aborted: " + first.verdict()
                + "\nwatchdog: transaction #5 not complete"));
        assertEquals(first.verdict() + "\nrank 0 failed: dev.jnccl.CommunicatorAbortedException: communicator of rank 0"
                + " aborted: watchdog: transaction #5 not complete", pack.cancellation());
        CommunicatorAbortedException released = assertThrows(CommunicatorAbortedException.class,
                () -> pack.barrier("barrier", 1, LONG_NANOS));
        assertEquals(first.verdict() + "\nbarrier on rank 1 released: rank 0 failed: dev.jnccl.CommunicatorAbortedException:"
                + " communicator of rank 0 aborted: watchdog: transaction #5 not complete", released.getMessage());
        assertSame(first, released.diagnosis().orElseThrow());
        PackState split = pack.child(1, 0, List.of(0, 2));
        assertSame(first, split.diagnosis());
        assertTrue(split.cancellation().startsWith(first.verdict() + "\nrank 0 failed: "), split.cancellation());
    }
}

