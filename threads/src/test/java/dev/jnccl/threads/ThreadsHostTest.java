package dev.jnccl.threads;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.CommunicatorAbortedException;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * A rank's host side over the pack's shared state, with plain threads as ranks (no communicator,
 * no device): the host gathers hand each rank arrays of its own, the pace is the throttle with the
 * options' lead, and abort reasons put the pack's failure first.
 */
class ThreadsHostTest {
    private static final Duration DRAIN = Duration.ofSeconds(1);
    private static final long LONG_NANOS = TimeUnit.SECONDS.toNanos(30);
    private static final int SIZE = 3;

    private static byte[][] randomInputs(int length) {
        Random random = new Random();
        byte[][] inputs = new byte[SIZE][];
        for (int rank = 0; rank < SIZE; rank++) {
            inputs[rank] = new byte[length + rank]; // lengths differ too
            random.nextBytes(inputs[rank]);
        }
        return inputs;
    }

    private static byte[][] copies(byte[][] arrays) {
        return Arrays.stream(arrays).map(byte[]::clone).toArray(byte[][]::new);
    }

    @Test
    void allGatherGivesEveryRankArraysOfItsOwn() throws Exception {
        byte[][] inputs = randomInputs(64);
        byte[][] expected = copies(inputs);
        PackState pack = new PackState(SIZE, DRAIN);
        RankThreads ranks = RankThreads.start(SIZE, rank -> {
            ThreadsHost host = new ThreadsHost(pack, ThreadsOptions.defaults(), rank);
            List<byte[]> all = host.allGather(inputs[rank], LONG_NANOS);
            host.barrier(LONG_NANOS); // every rank has its result before rank 0 scribbles on its own
            if (rank == 0) {
                for (byte[] bytes : all) {
                    Arrays.fill(bytes, (byte) 0x5a);
                }
                Arrays.fill(inputs[rank], (byte) 0x5a);
            }
            host.barrier(LONG_NANOS);
            return all;
        }, 0, 1, 2).join();
        @SuppressWarnings("unchecked")
        List<byte[]>[] results = new List[SIZE];
        for (int rank = 0; rank < SIZE; rank++) {
            ranks.assertNoError(rank);
            results[rank] = (List<byte[]>) ranks.result(rank);
            assertEquals(SIZE, results[rank].size());
        }
        for (int rank = 1; rank < SIZE; rank++) {
            for (int from = 0; from < SIZE; from++) {
                assertArrayEquals(expected[from], results[rank].get(from),
                        "rank " + rank + " sees rank 0's writes in the bytes of rank " + from);
                assertNotSame(results[0].get(from), results[rank].get(from));
                assertNotSame(inputs[from], results[rank].get(from));
            }
        }
        assertNull(pack.failure());
    }

    @Test
    void gatherGivesTheRootArraysOfItsOwnAndTheOthersNothing() throws Exception {
        int root = 1;
        byte[][] inputs = randomInputs(32);
        byte[][] expected = copies(inputs);
        PackState pack = new PackState(SIZE, DRAIN);
        RankThreads ranks = RankThreads.start(SIZE, rank -> {
            ThreadsHost host = new ThreadsHost(pack, ThreadsOptions.defaults(), rank);
            List<byte[]> gathered = host.gather(inputs[rank], root, LONG_NANOS);
            Arrays.fill(inputs[rank], (byte) 0x33); // each sender reuses its buffer at once
            host.barrier(LONG_NANOS);
            return gathered;
        }, 0, 1, 2).join();
        for (int rank = 0; rank < SIZE; rank++) {
            ranks.assertNoError(rank);
            @SuppressWarnings("unchecked")
            List<byte[]> gathered = (List<byte[]>) ranks.result(rank);
            if (rank != root) {
                assertEquals(List.of(), gathered, "rank " + rank + " is not the root");
                continue;
            }
            assertEquals(SIZE, gathered.size());
            for (int from = 0; from < SIZE; from++) {
                assertArrayEquals(expected[from], gathered.get(from), "the bytes of rank " + from);
            }
        }
    }

    @Test
    void paceWaitsWithinTheOptionsLead() {
        PackState pack = new PackState(2, DRAIN);
        ThreadsHost host = new ThreadsHost(pack, ThreadsOptions.defaults().withMaxLead(1), 0);
        host.pace(LONG_NANOS); // #1, one ahead of rank 1 (at #0): within the lead
        CommunicatorAbortedException e = assertThrows(CommunicatorAbortedException.class,
                () -> host.pace(TimeUnit.MILLISECONDS.toNanos(200)));
        assertTrue(e.getMessage().startsWith("transaction #2 of rank 0 waited "), e.getMessage());
        assertTrue(e.getMessage().endsWith(" ms for rank 1 (at transaction #0) to come within ThreadsOptions.maxLead 1"),
                e.getMessage());
        assertEquals(0, pack.failure().rank());
    }

    @Test
    void pollNamesAPeerThatClosedAfterFewerTransactionsOnceTheLastOnesWaitedAGrace() {
        Random random = new Random();
        long closedAfter = random.nextInt(50);
        long executed = closedAfter + 1 + random.nextInt(5);
        long waited = TimeUnit.MILLISECONDS.toNanos(1000 + random.nextInt(9000));
        PackState pack = new PackState(SIZE, DRAIN);
        ThreadsHost waiting = new ThreadsHost(pack, ThreadsOptions.defaults(), 0);
        assertNull(waiting.poll(executed, waited), "no peer has closed");

        assertNull(new ThreadsHost(pack, ThreadsOptions.defaults(), 2).closing(closedAfter, LONG_NANOS));
        assertNull(waiting.poll(executed, -1), "nothing pending");
        assertNull(waiting.poll(executed, TimeUnit.MILLISECONDS.toNanos(999)), "within the grace");
        assertNull(waiting.poll(closedAfter, waited), "rank 2 executed as many");
        assertEquals("rank 2 closed its communicator after " + closedAfter + " transaction(s) while this rank executed "
                + executed + " and has waited " + TimeUnit.NANOSECONDS.toMillis(waited) + " ms for the last ones: they"
                + " wait for a rank that will not join them", waiting.poll(executed, waited));
        assertNull(pack.failure(), "the poll only answers: the watchdog aborts");
        // A rank that closed starts no more transactions: it holds nobody back in the throttle.
        ThreadsHost ahead = new ThreadsHost(pack, ThreadsOptions.defaults().withMaxLead(1), 1);
        new ThreadsHost(pack, ThreadsOptions.defaults(), 0).closing(0, LONG_NANOS);
        for (int t = 0; t < 5; t++) {
            ahead.pace(TimeUnit.MILLISECONDS.toNanos(200));
        }
        assertNull(pack.failure());
    }

    @Test
    void pollNamesASplitsPeerAsTheWholePackKnowsIt() {
        PackState pack = new PackState(4, DRAIN);
        PackState split = pack.child(0, 3, List.of(3, 1));
        new ThreadsHost(split, ThreadsOptions.defaults(), 0).closing(2, LONG_NANOS);
        String reason = new ThreadsHost(split, ThreadsOptions.defaults(), 1).poll(3, TimeUnit.SECONDS.toNanos(2));
        assertNotNull(reason);
        assertTrue(reason.startsWith("rank 3 (rank 0 of a split) closed its communicator after 2 transaction(s) while"
                + " this rank executed 3 "), reason);
        assertNull(new ThreadsHost(pack, ThreadsOptions.defaults(), 0).poll(3, TimeUnit.SECONDS.toNanos(2)),
                "a split's close is no close of the whole pack's communicator");
    }

    @Test
    void explainAbortPutsThePacksFailureFirst() {
        PackState pack = new PackState(SIZE, DRAIN);
        ThreadsHost host = new ThreadsHost(pack, ThreadsOptions.defaults(), 0);
        assertEquals("watchdog: allReduce took too long", host.explainAbort("watchdog: allReduce took too long"));
        assertNull(host.cancellation());

        IllegalStateException boom = new IllegalStateException("boom " + new Random().nextInt());
        pack.fail(2, boom);
        String cause = "rank 2 failed: " + boom;
        assertEquals(cause, host.cancellation());
        assertEquals(cause + "; then: watchdog: allReduce took too long",
                host.explainAbort("watchdog: allReduce took too long"));
        // A reason that already names the pack's failure is not repeated.
        assertEquals("released: " + cause, host.explainAbort("released: " + cause));
        // Nor one the pack's failure already says (every rank aborts with the same verdict).
        assertEquals(cause, host.explainAbort("boom"));
    }

    @Test
    void anAbortOfOneRanksCommunicatorFailsThePack() {
        PackState pack = new PackState(SIZE, DRAIN);
        new ThreadsHost(pack, ThreadsOptions.defaults(), 1).aborting("watchdog fired");
        assertEquals(1, pack.failure().rank());
        assertEquals("rank 1 failed: " + new CommunicatorAbortedException("communicator of rank 1 aborted: watchdog fired"),
                pack.cancellation());
        ThreadsHost other = new ThreadsHost(pack, ThreadsOptions.defaults(), 0);
        assertEquals("barrier on rank 0 released: " + pack.cancellation(),
                assertThrows(CommunicatorAbortedException.class, () -> other.barrier(LONG_NANOS)).getMessage());
    }
}
