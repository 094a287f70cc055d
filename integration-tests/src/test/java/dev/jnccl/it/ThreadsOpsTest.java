package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.it.Packs.Mode;
import dev.jnccl.junit.MultiRankTest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Threads mode, worlds 1, 2, 3, 4 and 8: broadcast from every root, send/recv to the rank itself
 * (alone at world 1 and inside larger rings), the non-destructive all-to-all of every dtype against
 * a Java reference — each with NCCL and with the memcpy send/recv transport — and sub-communicators
 * (halves, odd/even in reverse key order, singletons, ranks that opt out) with collectives and host
 * gathers on each child, and children left open when the work ends (closed with the parent).
 * Random data from per-rank seeds, compared element by element (bit for bit: the operations only
 * move data, or reduce integers). The ring, all-to-all and split suites are {@code @MultiRankTest}s
 * (jnccl-junit): one invocation per world, each rank calling the method with its communicator.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsOpsTest {
    private static final int[] WORLDS = {1, 2, 3, 4, 8};
    /** The data's seed for the {@code @MultiRankTest} methods ({@code -Djnccl.it.seed} fixes it; messages print it). */
    private static final long SEED = Packs.newSeed();

    /** No rank or watchdog thread outlives a test (the extension closes its packs, bounded). */
    @AfterEach
    void noPackThreadsLeft() {
        Packs.assertNoPackThreads();
    }

    /** Worlds 1, 2, 3, 4, 8 with every transport mode: the collectives suite's matrix. */
    static Stream<Arguments> matrix() {
        return ThreadsCollectivesTest.matrix();
    }

    /** NCCL send/recv and the memcpy send/recv transport (all-gather's transport plays no part in these). */
    static Stream<Arguments> sendRecvMatrix() {
        List<Arguments> cases = new ArrayList<>();
        for (int world : WORLDS) {
            cases.add(Arguments.of(world, new Mode(false, false)));
            cases.add(Arguments.of(world, new Mode(true, true)));
        }
        return cases.stream();
    }

    // ================================================================== broadcast

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("matrix")
    void broadcastFromEveryRoot(int world, Mode mode) {
        Packs.run(world, mode.options(), OpsScenarios::broadcastFromEveryRoot);
    }

    // ================================================================== send/recv to self

    /**
     * The ring of any world size: send to {@code rank + k}, receive from {@code rank - k}, for
     * k = 0 (this rank itself) and k = 1 (the neighbours; the rank itself again at world 1), with
     * other commands in between; then a transaction with only messages to itself. Over NCCL.
     */
    @MultiRankTest(worlds = {1, 2, 3, 4, 8})
    void sendAndReceiveToItselfAloneAndInRings(Communicator comm) {
        Packs.asRank(comm, SEED, OpsScenarios::sendAndReceiveToItselfAloneAndInRings);
    }

    /** As {@link #sendAndReceiveToItselfAloneAndInRings}, over threads mode's memcpy transports. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 8}, options = Packs.MemcpyTransports.class)
    void sendAndReceiveToItselfAloneAndInRingsByMemcpy(Communicator comm) {
        Packs.asRank(comm, SEED, OpsScenarios::sendAndReceiveToItselfAloneAndInRings);
    }

    // ================================================================== all-to-all

    /**
     * Every dtype (all-to-all only moves bytes, so one random byte pattern per rank and dtype is
     * the data), in a transaction between a ring send and its receive (the all-to-all's messages
     * must never pair with them, on NCCL or memcpy), then the convenience form. Over NCCL.
     */
    @MultiRankTest(worlds = {1, 2, 3, 4, 8})
    void allToAllOfEveryDtypeMatchesTheReference(Communicator comm) {
        Packs.asRank(comm, SEED, OpsScenarios::allToAllOfEveryDtype);
    }

    /** As {@link #allToAllOfEveryDtypeMatchesTheReference}, over threads mode's memcpy transports. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 8}, options = Packs.MemcpyTransports.class)
    void allToAllOfEveryDtypeMatchesTheReferenceByMemcpy(Communicator comm) {
        Packs.asRank(comm, SEED, OpsScenarios::allToAllOfEveryDtype);
    }

    // ================================================================== split

    /** Splits: NCCL and the memcpy transports, as for send/recv. */
    static Stream<Arguments> splitMatrix() {
        return sendRecvMatrix();
    }

    /**
     * For every grouping: the members and their order as NCCL's (key, then rank), an all-reduce,
     * an all-gather, a broadcast from the child's last rank, an all-to-all and host gathers among
     * the members only; the parent keeps working between splits. Over NCCL.
     */
    @MultiRankTest(worlds = {1, 2, 3, 4, 8}, timeoutSeconds = 120)
    void splitIntoGroupsWithCollectivesAndHostGathersOnEachChild(Communicator comm) {
        Packs.asRank(comm, SEED, OpsScenarios::splitIntoGroups);
    }

    /** As {@link #splitIntoGroupsWithCollectivesAndHostGathersOnEachChild}, over the memcpy transports. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 8}, timeoutSeconds = 120, options = Packs.MemcpyTransports.class)
    void splitIntoGroupsWithCollectivesAndHostGathersOnEachChildByMemcpy(Communicator comm) {
        Packs.asRank(comm, SEED, OpsScenarios::splitIntoGroups);
    }

    /**
     * Children that the work leaves open (a child, and a child of the child) are closed with the
     * parent when the rank's work ends; their watchdog threads end too (Packs.run checks that no
     * pack thread survives).
     */
    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("splitMatrix")
    void childrenLeftOpenAreClosedWithTheParent(int world, Mode mode) {
        Map<Integer, List<Communicator>> left = new ConcurrentHashMap<>();
        Map<Integer, Communicator> parents = new ConcurrentHashMap<>();
        var options = mode.options().withCommunicator(CommunicatorOptions.defaults().withWatchdog(Duration.ofSeconds(30)));
        Packs.run(world, options, c -> {
            Communicator child = c.comm.split(c.rank % 2, c.rank).orElseThrow();
            Communicator grandChild = child.split(0, -c.rank).orElseThrow();
            DeviceTensor t = c.upload(Data.int32(c.seed(c.rank, "open"), OpsScenarios.SLOT));
            grandChild.allReduce(t, ReduceOp.MAX, c.compute());
            c.compute().synchronize();
            List<int[]> all = new ArrayList<>();
            for (int r = c.rank % 2; r < c.world; r += 2) {
                all.add(Data.int32(c.seed(r, "open"), OpsScenarios.SLOT));
            }
            Verify.ints(c.what("allReduce MAX on the grandchild"), Data.reduceInt(all, ReduceOp.MAX, 0, OpsScenarios.SLOT), c.ints(t));
            left.put(c.rank, List.of(child, grandChild));
            parents.put(c.rank, c.comm);
        });
        assertEquals(world, left.size());
        for (var entry : left.entrySet()) {
            assertTrue(parents.get(entry.getKey()).isClosed(), "rank " + entry.getKey() + ": parent closed");
            for (Communicator child : entry.getValue()) {
                assertTrue(child.isClosed(), "rank " + entry.getKey() + ": " + child + " closed with its parent");
                assertTrue(!child.isAborted(), "rank " + entry.getKey() + ": " + child + " closed, not aborted");
            }
        }
    }
}
