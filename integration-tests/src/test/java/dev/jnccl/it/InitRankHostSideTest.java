package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.UniqueId;
import dev.jnccl.cuda.Cuda;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReferenceArray;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

/**
 * The host side of {@link Communicator#initRank} (NCCL collectives of the communicator itself):
 * barrier, host gathers and split among threads of one JVM, each calling initRank, and its bounded
 * waits (a rank that never arrives, an interrupt). Runs on the emulation in the build and on real
 * NCCL on the GPU machine: {@code JNCCL_MULTI_RANK_TESTS=InitRankHostSideTest scripts/gpu/gpu-test.sh
 * --threads-multi-rank} (several ranks on one GPU need NCCL 2.30+ there).
 */
class InitRankHostSideTest {
    private static final Duration BOUND = Duration.ofSeconds(20);

    /** What one rank does with its communicator; the ranks' failures are collected and rethrown. */
    interface RankWork {
        void run(Communicator comm) throws Exception;
    }

    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {1, 2, 3, 4})
    void barrierGathersAndSplit(int world) throws Exception {
        long seed = Packs.newSeed();
        ranks(world, CommunicatorOptions.defaults(), comm -> {
            int rank = comm.rank();
            comm.barrier();
            // Random lengths, an empty one among them, and random bytes.
            List<byte[]> expected = new ArrayList<>();
            for (int r = 0; r < world; r++) {
                expected.add(bytes(seed, r));
            }
            List<byte[]> all = comm.allGatherBytesHost(expected.get(rank));
            assertEquals(world, all.size());
            for (int r = 0; r < world; r++) {
                assertArrayEquals(expected.get(r), all.get(r), "rank " + rank + ": bytes of rank " + r + ", seed " + seed);
            }
            int root = world - 1;
            List<byte[]> gathered = comm.gatherBytesHost(expected.get(rank), root);
            assertEquals(rank == root ? world : 0, gathered.size(), "gather on rank " + rank);
            for (int r = 0; r < gathered.size(); r++) {
                assertArrayEquals(expected.get(r), gathered.get(r), "gather: bytes of rank " + r + ", seed " + seed);
            }
            long[] longs = comm.allGatherLongsHost(1000L * rank - 7);
            for (int r = 0; r < world; r++) {
                assertEquals(1000L * r - 7, longs[r]);
            }
            comm.barrier();
            // Split: even and odd ranks, ordered by descending rank.
            Optional<Communicator> child = comm.split(rank % 2, -rank);
            assertTrue(child.isPresent());
            try (Communicator c = child.get()) {
                int members = (world + 1 - rank % 2) / 2;
                assertEquals(members, c.worldSize(), "split of rank " + rank);
                long[] parents = c.allGatherLongsHost(rank);
                for (int i = 0; i < members; i++) {
                    long parentRank = parents[i];
                    assertEquals(rank % 2, parentRank % 2, "member " + i + " has the other color");
                    if (i > 0) {
                        assertTrue(parentRank < parents[i - 1], "members ordered by key: " + java.util.Arrays.toString(parents));
                    }
                }
                c.barrier();
            } // last: with ranks sharing a device, a close (cudaFree) must not meet a peer's pending collective
        });
    }

    @Test
    void aRankMissingFromTheBarrierEndsTheOthersAtTheHostTimeout() throws Exception {
        assumeWorld(2);
        CommunicatorOptions options = CommunicatorOptions.defaults().withWatchdog(Duration.ofSeconds(2));
        AtomicReferenceArray<Throwable> seen = new AtomicReferenceArray<>(2);
        long[] millis = new long[1];
        CountDownLatch rank0Done = new CountDownLatch(1);
        ranks(2, options, comm -> {
            if (comm.rank() == 1) {
                // Never calls barrier: waits (bounded) until rank 0 gave up, then leaves.
                assertTrue(rank0Done.await(30, TimeUnit.SECONDS));
                comm.abort("the test's rank 1 leaves");
                return;
            }
            long start = System.nanoTime();
            try {
                comm.barrier();
            } catch (CommunicatorAbortedException e) {
                seen.set(0, e);
                millis[0] = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
            } finally {
                rank0Done.countDown();
            }
            assertTrue(comm.isAborted(), "a barrier that timed out aborts its communicator");
        });
        assertNotNull(seen.get(0), "rank 0's barrier returned although rank 1 never called it");
        assertTrue(millis[0] >= 1_500 && millis[0] < 15_000, "the barrier ended after " + millis[0] + " ms (timeout 2 s)");
    }

    @Test
    void aPeerAbortingDuringTheBarrierFailsItInsteadOfCompletingIt() throws Exception {
        assumeWorld(2);
        // The watchdog bounds the wait where NCCL does not report a peer's abort (real NCCL on one node).
        CommunicatorOptions options = CommunicatorOptions.defaults().withWatchdog(Duration.ofSeconds(5));
        AtomicReferenceArray<Throwable> seen = new AtomicReferenceArray<>(2);
        CountDownLatch rank0Done = new CountDownLatch(1);
        long[] millis = new long[1];
        ranks(2, options, comm -> {
            if (comm.rank() == 1) {
                Thread.sleep(500); // rank 0 is inside its barrier's all-reduce by now
                long aborted = System.nanoTime();
                comm.abort("the test's rank 1 aborts instead of joining the barrier");
                assertTrue(rank0Done.await(30, TimeUnit.SECONDS), "rank 0 did not end after rank 1's abort");
                millis[0] = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - aborted);
                return;
            }
            try {
                comm.barrier();
            } catch (CommunicatorAbortedException e) {
                seen.set(0, e);
            } finally {
                rank0Done.countDown();
            }
            assertTrue(comm.isAborted(), "a barrier that failed aborts its communicator");
        });
        assertNotNull(seen.get(0), "rank 0's barrier returned although rank 1 aborted instead of joining it");
        assertTrue(millis[0] < 10_000, "rank 0 ended " + millis[0] + " ms after rank 1's abort (watchdog 5 s)");
    }

    @Test
    void anInterruptEndsAHostGatherAndAbortsTheRank() throws Exception {
        assumeWorld(2);
        AtomicReferenceArray<Throwable> seen = new AtomicReferenceArray<>(2);
        CountDownLatch rank0Done = new CountDownLatch(1);
        Thread[] rank0 = new Thread[1];
        long[] millis = new long[1];
        ranks(2, CommunicatorOptions.defaults(), comm -> {
            if (comm.rank() == 1) {
                Thread.sleep(500);
                long interrupted = System.nanoTime();
                rank0[0].interrupt();
                assertTrue(rank0Done.await(30, TimeUnit.SECONDS), "rank 0 did not end after its interrupt");
                millis[0] = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - interrupted);
                comm.abort("the test's rank 1 leaves");
                return;
            }
            rank0[0] = Thread.currentThread();
            try {
                comm.allGatherBytesHost(new byte[] {1, 2, 3});
            } catch (CommunicatorAbortedException e) {
                seen.set(0, e);
                assertTrue(Thread.interrupted(), "the interrupt status is kept");
            } finally {
                rank0Done.countDown();
            }
        });
        Throwable t = seen.get(0);
        assertNotNull(t, "the host gather returned although rank 1 never called it");
        assertInstanceOf(InterruptedException.class, t.getCause(), () -> "cause of " + t);
        assertTrue(millis[0] < 2_000, "rank 0 ended " + millis[0] + " ms after its interrupt");
    }

    private static void assumeWorld(int world) {
        int devices = Cuda.deviceCount();
        assumeTrue(world <= devices || Packs.SHARE_DEVICES, "world " + world + " needs " + world + " devices; "
                + devices + " visible (-Djnccl.it.shareDevices=true puts several ranks on one device)");
    }

    /** Runs {@code work} on {@code world} threads, each with its initRank communicator (rank r on device r mod devices). */
    private static void ranks(int world, CommunicatorOptions options, RankWork work) throws Exception {
        assumeWorld(world);
        int devices = Cuda.deviceCount();
        UniqueId id = UniqueId.generate();
        AtomicReferenceArray<Throwable> errors = new AtomicReferenceArray<>(world);
        List<Thread> threads = new ArrayList<>();
        for (int rank = 0; rank < world; rank++) {
            int r = rank;
            threads.add(Thread.ofPlatform().name("init-rank-" + r).start(() -> {
                try (Communicator comm = Communicator.initRank(id, r, world, r % devices, options)) {
                    work.run(comm);
                } catch (Throwable t) {
                    errors.set(r, t);
                }
            }));
        }
        for (Thread thread : threads) {
            if (!thread.join(BOUND)) {
                StringBuilder stacks = new StringBuilder();
                for (Thread t : threads) {
                    stacks.append("\n").append(t.getName()).append(":");
                    for (StackTraceElement e : t.getStackTrace()) {
                        stacks.append("\n    ").append(e);
                    }
                    t.interrupt(); // the next test must not meet these threads
                }
                throw new AssertionError(thread.getName() + " did not finish within " + BOUND + stacks);
            }
        }
        for (int rank = 0; rank < world; rank++) {
            if (errors.get(rank) != null) {
                throw new AssertionError("rank " + rank + " failed", errors.get(rank));
            }
        }
    }

    private static byte[] bytes(long seed, int rank) {
        Random random = new Random(seed * 31 + rank);
        byte[] bytes = new byte[rank == 1 ? 0 : 1 + random.nextInt(300)];
        random.nextBytes(bytes);
        return bytes;
    }
}
