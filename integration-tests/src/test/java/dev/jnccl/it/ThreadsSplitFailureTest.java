package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorMode;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.it.Packs.Mode;
import dev.jnccl.it.ThreadsFailureTest.Outcome;
import dev.jnccl.threads.ThreadsOptions;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A failure inside a sub-communicator releases the whole pack: world 4 split into halves
 * ({0, 1} and {2, 3}); rank 3 fails while rank 2 waits for it in the child (in a host barrier, or
 * inside a child collective that rank 3 never joins) and ranks 0 and 1 wait in their own child or in
 * the parent. Every rank must be released with {@link CommunicatorAbortedException} naming rank 3,
 * and {@code join()} rethrows rank 3's exception with the others attached. The same when rank 3
 * fails while the others are inside {@code split}, in both communicator modes.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsSplitFailureTest {
    private static final int WORLD = 4;
    private static final int FAILING = 3;
    private static final int N = 840;

    @RegisterExtension
    final PackMemory memory = new PackMemory();

    static List<Mode> modes() {
        return ThreadsFailureTest.modes().toList();
    }

    /** Rank 3 throws; rank 2 waits in the child's barrier, rank 1 in its child's barrier, rank 0 in the parent's. */
    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aRankFailingInAChildReleasesEveryRank(Mode mode) {
        IllegalStateException boom = new IllegalStateException("rank 3 gives up inside its sub-communicator");
        Map<Integer, String> where = new ConcurrentHashMap<>();
        CountDownLatch waiting = new CountDownLatch(WORLD - 1);
        Outcome outcome = ThreadsFailureTest.runFailing(WORLD, mode.options(), comm -> {
            Communicator half = comm.split(comm.rank() / 2, comm.rank()).orElseThrow();
            half.barrier(); // the split worked everywhere
            switch (comm.rank()) {
                case 0 -> {
                    where.put(0, "parent barrier");
                    waiting.countDown();
                    comm.barrier();
                }
                case 1 -> {
                    where.put(1, "child barrier of {0, 1}");
                    waiting.countDown();
                    half.barrier();
                    half.barrier();
                }
                case 2 -> {
                    where.put(2, "child barrier of {2, 3}");
                    waiting.countDown();
                    half.barrier();
                }
                default -> {
                    awaitOthers(waiting); // then they are (about to be) inside their waits
                    throw boom;
                }
            }
            fail("rank " + comm.rank() + " returned from " + where.get(comm.rank()) + " although rank 3 failed");
        });
        ThreadsFailureTest.assertPropagated(outcome, WORLD, FAILING, boom);
        assertReleasedEverywhere(outcome, where);
    }

    /**
     * Rank 3 never joins the child's all-reduce that rank 2 is inside (rank 2 waits in NCCL, not in
     * a host barrier): the failure of rank 3 aborts the child communicators too.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aRankMissingAChildCollectiveReleasesItsPeerInside(Mode mode) {
        IllegalStateException boom = new IllegalStateException("rank 3 skips the child all-reduce");
        Map<Integer, String> where = new ConcurrentHashMap<>();
        CountDownLatch waiting = new CountDownLatch(WORLD - 1);
        Outcome outcome = ThreadsFailureTest.runFailing(WORLD, mode.options(), comm -> {
            Communicator half = comm.split(comm.rank() / 2, comm.rank()).orElseThrow();
            DeviceTensor t = memory.fp32(N);
            switch (comm.rank()) {
                case 2 -> {
                    where.put(2, "child allReduce");
                    waiting.countDown();
                    half.allReduce(t, ReduceOp.SUM, half.stream());
                    half.synchronize();
                }
                case 3 -> {
                    awaitOthers(waiting);
                    throw boom;
                }
                default -> {
                    where.put(comm.rank(), "child synchronize, then parent barrier");
                    waiting.countDown();
                    half.allReduce(t, ReduceOp.SUM, half.stream());
                    half.synchronize();
                    comm.barrier();
                }
            }
            fail("rank " + comm.rank() + " returned from " + where.get(comm.rank()) + " although rank 3 failed");
        });
        ThreadsFailureTest.assertPropagated(outcome, WORLD, FAILING, boom);
        assertReleasedEverywhere(outcome, where);
    }

    static List<CommunicatorMode> communicatorModes() {
        return List.of(CommunicatorMode.values());
    }

    /**
     * Ranks 0, 1 and 2 are inside {@code split} (the exchange of colours and keys, then NCCL's split)
     * when rank 3, which never splits, throws: in either communicator mode their split must end with
     * {@link CommunicatorAbortedException} carrying rank 3's reason, promptly (far within the init
     * timeout of 60 s that bounds the split otherwise).
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("communicatorModes")
    void aPeerFailingWhileTheOthersSplitEndsTheirSplitWithItsReason(CommunicatorMode mode) {
        IllegalStateException boom = new IllegalStateException("rank 3 gives up instead of splitting");
        Map<Integer, String> where = new ConcurrentHashMap<>();
        CountDownLatch waiting = new CountDownLatch(WORLD - 1);
        ThreadsOptions options = ThreadsOptions.defaults().withCommunicator(CommunicatorOptions.defaults()
                .withMode(mode).withInitTimeout(Duration.ofSeconds(60)));
        Outcome outcome = ThreadsFailureTest.runFailing(WORLD, options, comm -> {
            if (comm.rank() == FAILING) {
                awaitOthers(waiting);
                throw boom;
            }
            where.put(comm.rank(), "split");
            waiting.countDown();
            comm.split(comm.rank() % 2, comm.rank());
            fail("rank " + comm.rank() + " returned from split although rank 3 failed");
        });
        ThreadsFailureTest.assertPropagated(outcome, WORLD, FAILING, boom);
        assertReleasedEverywhere(outcome, where);
        for (int r = 0; r < WORLD - 1; r++) {
            Throwable t = outcome.byRank().get(r);
            int rank = r;
            assertTrue(t.getMessage().contains(boom.getMessage()), () -> "rank " + rank + ": the reason is missing"
                    + " from " + ThreadsFailureTest.describe(t));
        }
        assertTrue(outcome.elapsed().compareTo(Duration.ofSeconds(20)) < 0, "the pack took " + outcome.elapsed());
    }

    private static void assertReleasedEverywhere(Outcome outcome, Map<Integer, String> where) {
        for (int r = 0; r < WORLD; r++) {
            if (r == FAILING) {
                continue;
            }
            Throwable t = outcome.byRank().get(r);
            int rank = r;
            assertNotNull(t, () -> "rank " + rank + " recorded no exception (released during init?)");
            assertInstanceOf(CommunicatorAbortedException.class, t, () -> "rank " + rank + " in " + where.get(rank)
                    + ": " + ThreadsFailureTest.describe(t));
            assertTrue(ThreadsFailureTest.chain(t).contains("rank " + FAILING), () -> "rank " + rank + " in "
                    + where.get(rank) + " does not name rank " + FAILING + ": " + ThreadsFailureTest.describe(t));
        }
        assertEquals(WORLD - 1, where.size(), "every other rank reached its wait: " + where);
    }

    /** Bounded wait until the other ranks are about to wait, then a moment for them to get inside. */
    private static void awaitOthers(CountDownLatch waiting) {
        try {
            assertTrue(waiting.await(10, TimeUnit.SECONDS), "the other ranks did not reach their waits");
            Thread.sleep(200);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
