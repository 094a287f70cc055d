package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.bindings.NativeLibraries;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import jdk.jfr.Recording;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordingFile;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@link Communicator#shrink}, {@link Communicator#revoke} and {@link RankLostException#recover()}
 * on the host emulation, ranks as threads of this JVM ({@link ElasticRanks}): W = 4, one rank never
 * calls again (dead), the survivors shrink by either path and run checked collectives on random data.
 */
@Timeout(180)
class ShrinkTest {
    private static final CommunicatorOptions OPTIONS = CommunicatorOptions.defaults()
            .withInitTimeout(Duration.ofSeconds(30)).withCloseTimeout(Duration.ofSeconds(10));
    private static final List<Integer> SURVIVORS = List.of(0, 1, 2);

    /** One rank's part of a test; {@code dead} is released once every survivor is done. */
    interface RankBody {
        Object run(Communicator comm, CountDownLatch dead) throws Exception;
    }

    @AfterEach
    void clearPathSetting() {
        System.clearProperty(Shrinks.PATH_PROPERTY);
    }

    @ParameterizedTest
    @ValueSource(strings = {"reinit", "nccl", "auto"})
    void survivorsOfADeadRankShrinkAndComputeExactly(String path) throws Throwable {
        System.setProperty(Shrinks.PATH_PROPERTY, path);
        long seed = new Random().nextLong();
        List<Object> results = run(4, new ElasticRanks.Pack(4), 3, (comm, dead) -> {
            ElasticRanks.checkCollectives(comm, List.of(0, 1, 2, 3), seed); // healthy first
            if (comm.rank() == 3) {
                return null; // never calls again
            }
            Communicator survivors = comm.shrink(3);
            assertEquals(SURVIVORS.indexOf(comm.rank()), survivors.rank());
            assertEquals(3, survivors.worldSize());
            assertEquals(comm.device(), survivors.device());
            assertTrue(comm.isAborted(), "the old communicator is aborted after the shrink");
            assertTrue(comm.abortReason().contains("shrunk to 3 ranks without ranks [3]"), comm.abortReason());
            if (path.equals("reinit")) {
                assertTrue(comm.abortReason().contains("by re-init"), comm.abortReason());
            }
            if (path.equals("nccl") && supports(NcclFeature.SHRINK)) {
                assertFalse(comm.abortReason().contains("by re-init"), "NCCL's shrink ran: " + comm.abortReason());
            }
            assertSame(survivors, comm.shrink(3), "a second shrink with the same ranks returns the same communicator");
            ElasticRanks.checkCollectives(survivors, SURVIVORS, seed + 7);
            ElasticRanks.checkCollectives(survivors, SURVIVORS, seed + 8);
            return null;
        });
        rethrowAny(results);
    }

    /**
     * The usual case mid-step: the survivors' collective is pending on the dead rank when they shrink.
     * Automatically that is a re-init (NCCL fails every shrink then); forced onto NCCL's path, the
     * shrink aborts the pending work first (NCCL_SHRINK_ABORT), and on the emulation it succeeds.
     */
    @ParameterizedTest
    @ValueSource(strings = {"auto", "nccl"})
    void survivorsWithACollectivePendingOnTheDeadRankShrink(String path) throws Throwable {
        System.setProperty(Shrinks.PATH_PROPERTY, path);
        long seed = new Random().nextLong();
        List<Object> results = run(4, new ElasticRanks.Pack(4), 3, (comm, dead) -> {
            if (comm.rank() == 3) {
                return null; // never joins the all-reduce below
            }
            try (CudaStream stream = CudaStream.create(); DeviceMemory stuck = DeviceMemory.allocate(DType.INT32, 64)) {
                try (Transaction tx = comm.begin(stream)) {
                    tx.allReduce(stuck.tensor(DType.INT32), ReduceOp.SUM);
                    tx.execute(null);
                }
                Communicator survivors = comm.shrink(3);
                if (path.equals("auto")) {
                    assertTrue(comm.abortReason().contains("by re-init"), comm.abortReason());
                    assertTrue(comm.abortReason().contains("work is pending on its comms stream"), comm.abortReason());
                } else if (supports(NcclFeature.SHRINK)) {
                    assertFalse(comm.abortReason().contains("by re-init"), "NCCL's shrink ran: " + comm.abortReason());
                }
                ElasticRanks.checkCollectives(survivors, SURVIVORS, seed);
            }
            return null;
        });
        rethrowAny(results);
    }

    @Test
    void oneSurvivorsFailedNcclShrinkSendsEverySurvivorToReinit() throws Throwable {
        assumeTrue(supports(NcclFeature.SHRINK), "the loaded NCCL has no ncclCommShrink");
        System.setProperty(Shrinks.PATH_PROPERTY, "nccl");
        long seed = new Random().nextLong();
        List<Object> results = run(4, new ElasticRanks.Pack(4), 3, (comm, dead) -> {
            if (comm.rank() == 3) {
                return null;
            }
            if (comm.rank() == 1) {
                comm.shrinks().injectNcclFailure("injected failure of rank 1 (test)");
            }
            Communicator survivors = comm.shrink(3);
            assertTrue(comm.abortReason().contains("by re-init: rank 1: ncclCommShrink failed: injected failure of rank 1"),
                    comm.abortReason());
            ElasticRanks.checkCollectives(survivors, SURVIVORS, seed);
            return null;
        });
        rethrowAny(results);
    }

    @Test
    void eachShrinkIsRecordedAsAJfrEvent() throws Throwable {
        System.setProperty(Shrinks.PATH_PROPERTY, "reinit");
        Path file = Files.createTempFile("jnccl-shrink-", ".jfr");
        try (Recording recording = new Recording()) {
            recording.enable("jnccl.Shrink");
            recording.start();
            rethrowAny(run(4, new ElasticRanks.Pack(4), 2, (comm, dead) -> comm.rank() == 2 ? null
                    : checkedAndNull(comm.shrink(2))));
            recording.stop();
            recording.dump(file);
            List<RecordedEvent> events = RecordingFile.readAllEvents(file).stream()
                    .filter(e -> e.getEventType().getName().equals("jnccl.Shrink")).toList();
            assertEquals(List.of(0, 1, 3), events.stream().map(e -> e.getInt("rank")).sorted().toList());
            for (RecordedEvent event : events) {
                assertEquals("reinit", event.getString("path"));
                assertEquals(4, event.getInt("fromWorld"));
                assertEquals(3, event.getInt("toWorld"));
                assertEquals("[2]", event.getString("excluded"));
                assertTrue(event.getDuration().toNanos() > 0, "the event lasts as long as the shrink");
            }
        } finally {
            Files.deleteIfExists(file);
        }
    }

    private static Object checkedAndNull(Communicator survivors) {
        ElasticRanks.checkCollectives(survivors, List.of(0, 1, 3), 5);
        return null;
    }

    @Test
    void anAbortedCommunicatorShrinksByReinit() throws Throwable {
        long seed = new Random().nextLong();
        List<Object> results = run(4, new ElasticRanks.Pack(4), 3, (comm, dead) -> {
            if (comm.rank() == 3) {
                return null;
            }
            comm.abort("rank 3 is gone (test)");
            Communicator survivors = comm.shrink(3);
            assertTrue(comm.abortReason().startsWith("rank 3 is gone (test)"), comm.abortReason());
            assertTrue(comm.abortReason().contains("by re-init"), comm.abortReason());
            ElasticRanks.checkCollectives(survivors, SURVIVORS, seed);
            return null;
        });
        rethrowAny(results);
    }

    @Test
    void twoSuccessiveShrinksGoFromFourToTwo() throws Throwable {
        long seed = new Random().nextLong();
        List<Object> results = run(4, new ElasticRanks.Pack(4), 3, (comm, dead) -> {
            if (comm.rank() == 3) {
                return null;
            }
            Communicator three = comm.shrink(3);
            ElasticRanks.checkCollectives(three, SURVIVORS, seed);
            if (three.rank() == 2) {
                return null; // old rank 2 is lost next
            }
            Communicator two = three.shrink(2);
            assertEquals(2, two.worldSize());
            assertEquals(comm.rank(), two.rank());
            ElasticRanks.checkCollectives(two, List.of(0, 1), seed + 1);
            return null;
        });
        rethrowAny(results);
    }

    @Test
    void revokeRefusesWorkThenShrinkWorks() throws Throwable {
        long seed = new Random().nextLong();
        List<Object> results = run(4, new ElasticRanks.Pack(4), 3, (comm, dead) -> {
            if (comm.rank() == 3) {
                return null;
            }
            if (!supports(NcclFeature.REVOKE)) {
                UnsupportedOperationException refused = assertThrows(UnsupportedOperationException.class, comm::revoke);
                assertTrue(refused.getMessage().contains("needs NCCL 2.28"), refused.getMessage());
                return null;
            }
            comm.revoke();
            comm.revoke(); // idempotent
            try (CudaStream stream = CudaStream.create(); DeviceMemory one = DeviceMemory.allocate(DType.INT32, 1)) {
                CommunicatorAbortedException refused = assertThrows(CommunicatorAbortedException.class,
                        () -> comm.allReduce(one.tensor(DType.INT32), ReduceOp.SUM, stream));
                assertTrue(refused.getMessage().contains("revoked"), refused.getMessage());
            }
            assertFalse(comm.isAborted());
            Communicator survivors = comm.shrink(3);
            ElasticRanks.checkCollectives(survivors, SURVIVORS, seed);
            return null;
        });
        rethrowAny(results);
    }

    @Test
    void aRevokedCommunicatorClosesAndAborts() throws Throwable {
        assumeTrue(supports(NcclFeature.REVOKE), "the loaded NCCL has no ncclCommRevoke");
        List<Object> results = run(2, new ElasticRanks.Pack(2), -1, (comm, dead) -> {
            comm.revoke();
            CommunicatorAbortedException refused = assertThrows(CommunicatorAbortedException.class, comm::barrier);
            assertTrue(refused.getMessage().contains("was revoked (Communicator.revoke)"), refused.getMessage());
            if (comm.rank() == 0) {
                comm.abort("after the revoke (test)");
                assertTrue(comm.isAborted());
                assertTrue(comm.abortReason().contains("after the revoke (test)"), comm.abortReason());
            }
            comm.close();
            assertTrue(comm.isClosed());
            return null;
        });
        rethrowAny(results);
    }

    @Test
    void everySurvivorRecoversFromRankLostException() throws Throwable {
        long seed = new Random().nextLong();
        ElasticRanks.Pack pack = new ElasticRanks.Pack(4);
        CountDownLatch aborted = new CountDownLatch(3);
        List<Object> results = run(4, pack, 3, (comm, dead) -> {
            if (comm.rank() == 3) {
                pack.lost = List.of(3); // the launcher learns that rank 3 is lost and aborts the survivors
                return null;
            }
            aborted.countDown();
            assertTrue(aborted.await(30, TimeUnit.SECONDS));
            while (pack.lost.isEmpty()) {
                Thread.sleep(5);
            }
            comm.abort("the launcher lost rank 3 (test)");
            RankLostException lost;
            try (CudaStream stream = CudaStream.create(); DeviceMemory one = DeviceMemory.allocate(DType.INT32, 1)) {
                lost = assertThrows(RankLostException.class,
                        () -> comm.allReduce(one.tensor(DType.INT32), ReduceOp.SUM, stream));
            }
            assertEquals(List.of(3), lost.lostRanks());
            assertTrue(lost.getMessage().contains("the launcher lost rank 3 (test)"), lost.getMessage());
            Communicator survivors = lost.recover();
            assertSame(survivors, lost.recover(), "recover is idempotent");
            RankLostException again = assertThrows(RankLostException.class, comm::barrier);
            assertSame(survivors, again.recover(), "every exception of the communicator recovers to the same one");
            ElasticRanks.checkCollectives(survivors, SURVIVORS, seed);
            return null;
        });
        rethrowAny(results);
    }

    @Test
    void everyInvalidArgumentIsRefusedBeforeAnythingHappens() throws Throwable {
        System.setProperty(Shrinks.PATH_PROPERTY, "fast");
        List<Object> results = run(4, new ElasticRanks.Pack(4), -1, (comm, dead) -> {
            int r = comm.rank();
            assertRefused(comm, null, "excludedRanks is null");
            assertRefused(comm, new int[0], "excludedRanks is empty");
            assertRefused(comm, new int[] {-1}, "excluded rank -1 out of range [0, 4)");
            assertRefused(comm, new int[] {4}, "excluded rank 4 out of range [0, 4)");
            assertRefused(comm, new int[] {(r + 1) % 4, (r + 1) % 4}, "is named twice");
            assertRefused(comm, new int[] {r}, "is this rank");
            assertRefused(comm, new int[] {0, 1, 2, 3}, "at least one must survive");
            // Set for the whole test (a JVM-wide property): the argument checks above come first.
            assertRefused(comm, new int[] {(r + 1) % 4}, "jnccl.shrink.path is \"fast\"; allowed: auto, nccl, reinit");
            ElasticRanks.checkCollectives(comm, List.of(0, 1, 2, 3), 42); // untouched
            return null;
        });
        rethrowAny(results);
    }

    private static void assertRefused(Communicator comm, int[] excluded, String expected) {
        IllegalArgumentException refused = assertThrows(IllegalArgumentException.class, () -> comm.shrink(excluded));
        assertTrue(refused.getMessage().contains(expected), refused.getMessage());
        assertFalse(comm.isAborted());
    }

    @Test
    void misuseIsRefused() throws Throwable {
        List<Object> results = run(2, new ElasticRanks.Pack(2), -1, (comm, dead) -> {
            int other = 1 - comm.rank();
            try (CudaStream stream = CudaStream.create(); Transaction open = comm.begin(stream)) {
                IllegalStateException refused = assertThrows(IllegalStateException.class, () -> comm.shrink(other));
                assertTrue(refused.getMessage().contains("shrink"), refused.getMessage());
            }
            assertFalse(comm.isAborted(), "a refused shrink changes nothing");
            comm.close();
            IllegalStateException closed = assertThrows(IllegalStateException.class, () -> comm.shrink(other));
            assertTrue(closed.getMessage().contains("is closed"), closed.getMessage());
            return null;
        });
        rethrowAny(results);
    }

    @Test
    void aSecondThreadIsRefusedWhileOneShrinks() throws Throwable {
        List<Object> results = run(4, new ElasticRanks.Pack(4), -1, (comm, dead) -> {
            if (comm.rank() != 0) {
                return null; // the other survivors never come: rank 0's shrink waits for them
            }
            Thread first = Thread.ofPlatform().start(() -> {
                try {
                    comm.shrink(3);
                } catch (CommunicatorAbortedException expected) {
                    // interrupted below
                }
            });
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (first.getState() != Thread.State.TIMED_WAITING && System.nanoTime() < deadline) {
                Thread.sleep(5); // until the first shrink waits for the other survivors
            }
            IllegalStateException refused = assertThrows(IllegalStateException.class, () -> comm.shrink(3));
            first.interrupt();
            first.join();
            assertTrue(refused.getMessage().contains("is already shrinking"), refused.getMessage());
            assertTrue(comm.isAborted(), "the interrupted shrink aborted the communicator");
            return null;
        });
        rethrowAny(results);
    }

    @Test
    void anInterruptDuringTheShrinkLeavesItAbortedWithoutANewCommunicator() throws Throwable {
        List<Object> results = run(4, new ElasticRanks.Pack(4), -1, (comm, dead) -> {
            if (comm.rank() != 0) {
                return null; // the other survivors never come: rank 0 waits for them
            }
            Thread me = Thread.currentThread();
            Thread interrupter = Thread.ofPlatform().daemon().start(() -> {
                try {
                    Thread.sleep(300);
                } catch (InterruptedException e) {
                    return;
                }
                me.interrupt();
            });
            long start = System.nanoTime();
            CommunicatorAbortedException interrupted = assertThrows(CommunicatorAbortedException.class,
                    () -> comm.shrink(3));
            assertTrue(Thread.interrupted(), "the interrupt status is kept");
            assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(10), "ended promptly");
            interrupter.join();
            assertTrue(comm.isAborted());
            assertTrue(comm.abortReason().contains("failed"), comm.abortReason());
            assertInstanceOf(CommunicatorAbortedException.class, interrupted);
            return null;
        });
        rethrowAny(results);
    }

    @Test
    void aLauncherWithoutShrinkRefusesIt() throws Throwable {
        List<Object> results = LocalRanks.run(2, OPTIONS, comm -> {
            UnsupportedOperationException refused = assertThrows(UnsupportedOperationException.class,
                    () -> comm.shrink(1 - comm.rank()));
            assertTrue(refused.getMessage().contains("this launcher cannot shrink"), refused.getMessage());
            assertFalse(comm.isAborted());
            return null;
        });
        LocalRanks.rethrowAny(results);
    }

    private static boolean supports(NcclFeature feature) {
        return NativeLibraries.load().supports(feature);
    }

    /**
     * Runs {@code body} on {@code world} ranks of {@code pack} (rank r on device r); rank {@code dead}
     * (-1: none) keeps its communicator open, never calling it, until every other rank is done.
     * Returns each rank's result or failure.
     */
    private static List<Object> run(int world, ElasticRanks.Pack pack, int dead, RankBody body) throws Exception {
        UniqueId id = UniqueId.generate();
        CountDownLatch others = new CountDownLatch(dead < 0 ? 0 : world - 1);
        ExecutorService pool = Executors.newFixedThreadPool(world);
        try {
            List<Future<Object>> futures = new ArrayList<>();
            for (int rank = 0; rank < world; rank++) {
                int r = rank;
                futures.add(pool.submit(() -> {
                    try (Communicator comm = ElasticRanks.create(id, pack, r, OPTIONS)) {
                        Object result = body.run(comm, others);
                        if (r == dead) {
                            assertTrue(others.await(120, TimeUnit.SECONDS), "the survivors finished");
                        }
                        return result;
                    } catch (Throwable t) {
                        return t;
                    } finally {
                        if (r != dead) {
                            others.countDown();
                        }
                    }
                }));
            }
            List<Object> results = new ArrayList<>();
            for (Future<Object> f : futures) {
                results.add(f.get(150, TimeUnit.SECONDS));
            }
            return results;
        } finally {
            pool.shutdownNow();
            assertTrue(pool.awaitTermination(20, TimeUnit.SECONDS));
        }
    }

    private static void rethrowAny(List<Object> results) throws Throwable {
        LocalRanks.rethrowAny(results);
        for (Object result : results) {
            assertNull(result);
        }
    }
}
