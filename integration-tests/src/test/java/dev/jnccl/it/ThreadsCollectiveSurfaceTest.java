package dev.jnccl.it;

import dev.jnccl.Communicator;
import dev.jnccl.junit.MultiRankTest;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Timeout;

/**
 * Threads mode, worlds 1 to 8: the out-of-place all-reduce, reduce-scatter and broadcast, reduce
 * to every root, gather and scatter (non-roots without buffers, in place on the root) and the
 * uneven all-to-all and all-gather, with NCCL and with the memcpy transports (which leave these
 * commands to NCCL, next to the sends and receives they move themselves), against Java references
 * element by element ({@link CollectiveScenarios}). Each is a {@code @MultiRankTest} (jnccl-junit):
 * one invocation per world, each rank calling the method with its communicator.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsCollectiveSurfaceTest {
    /** The data's seed ({@code -Djnccl.it.seed} fixes it; messages print it). */
    private static final long SEED = Packs.newSeed();

    /** No rank or watchdog thread outlives a test (the extension closes its packs, bounded). */
    @AfterEach
    void noPackThreadsLeft() {
        Packs.assertNoPackThreads();
    }

    /** The out-of-place all-reduce, reduce-scatter and broadcast, over NCCL. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 5, 6, 7, 8})
    void outOfPlaceReductionsMatchTheReference(Communicator comm) {
        Packs.asRank(comm, SEED, CollectiveScenarios::outOfPlaceReductions);
    }

    /** As {@link #outOfPlaceReductionsMatchTheReference}, with threads mode's memcpy transports on. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 5, 6, 7, 8}, options = Packs.MemcpyTransports.class)
    void outOfPlaceReductionsMatchTheReferenceByMemcpy(Communicator comm) {
        Packs.asRank(comm, SEED, CollectiveScenarios::outOfPlaceReductions);
    }

    /** Reduce to every root, over NCCL. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 5, 6, 7, 8})
    void reduceToEveryRootMatchesTheReference(Communicator comm) {
        Packs.asRank(comm, SEED, CollectiveScenarios::reduceToEveryRoot);
    }

    /** As {@link #reduceToEveryRootMatchesTheReference}, with threads mode's memcpy transports on. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 5, 6, 7, 8}, options = Packs.MemcpyTransports.class)
    void reduceToEveryRootMatchesTheReferenceByMemcpy(Communicator comm) {
        Packs.asRank(comm, SEED, CollectiveScenarios::reduceToEveryRoot);
    }

    /** Gather and scatter of every dtype (non-roots without buffers, in place on the root), over NCCL. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 5, 6, 7, 8})
    void gatherAndScatterOfEveryDtypeMatchTheReference(Communicator comm) {
        Packs.asRank(comm, SEED, CollectiveScenarios::gatherAndScatterOfEveryDtype);
    }

    /** As {@link #gatherAndScatterOfEveryDtypeMatchTheReference}, with threads mode's memcpy transports on. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 5, 6, 7, 8}, options = Packs.MemcpyTransports.class)
    void gatherAndScatterOfEveryDtypeMatchTheReferenceByMemcpy(Communicator comm) {
        Packs.asRank(comm, SEED, CollectiveScenarios::gatherAndScatterOfEveryDtype);
    }

    /** The uneven all-to-all of every dtype, over NCCL. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 5, 6, 7, 8})
    void unevenAllToAllOfEveryDtypeMatchesTheReference(Communicator comm) {
        Packs.asRank(comm, SEED, CollectiveScenarios::unevenAllToAllOfEveryDtype);
    }

    /** As {@link #unevenAllToAllOfEveryDtypeMatchesTheReference}, with threads mode's memcpy transports on. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 5, 6, 7, 8}, options = Packs.MemcpyTransports.class)
    void unevenAllToAllOfEveryDtypeMatchesTheReferenceByMemcpy(Communicator comm) {
        Packs.asRank(comm, SEED, CollectiveScenarios::unevenAllToAllOfEveryDtype);
    }

    /** The uneven all-gather of every dtype, over NCCL. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 5, 6, 7, 8})
    void unevenAllGatherOfEveryDtypeMatchesTheReference(Communicator comm) {
        Packs.asRank(comm, SEED, CollectiveScenarios::unevenAllGatherOfEveryDtype);
    }

    /** As {@link #unevenAllGatherOfEveryDtypeMatchesTheReference}, with threads mode's memcpy transports on. */
    @MultiRankTest(worlds = {1, 2, 3, 4, 5, 6, 7, 8}, options = Packs.MemcpyTransports.class)
    void unevenAllGatherOfEveryDtypeMatchesTheReferenceByMemcpy(Communicator comm) {
        Packs.asRank(comm, SEED, CollectiveScenarios::unevenAllGatherOfEveryDtype);
    }
}
