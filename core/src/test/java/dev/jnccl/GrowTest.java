package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.bindings.BackendSetting;
import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.spi.Modes;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import jdk.jfr.Recording;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordingFile;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * {@link Communicator#growTicket}, {@link Communicator#grow} and {@link Communicator#joinGrow} on the
 * host emulation, ranks as threads of this JVM ({@link ElasticRanks}): the existing ranks make the
 * ticket, the new ranks join with it, and every rank of the grown world runs checked collectives of
 * random data; misuse, a new rank that never comes, an interrupt.
 */
@Timeout(180)
class GrowTest {
    private static final CommunicatorOptions OPTIONS = CommunicatorOptions.defaults()
            .withInitTimeout(Duration.ofSeconds(30)).withCloseTimeout(Duration.ofSeconds(10));

    /** An existing rank's part of a test: its communicator and the place where it hands the ticket on. */
    interface ExistingBody {
        Object run(Communicator comm, CompletableFuture<GrowTicket> handOut) throws Exception;
    }

    @AfterEach
    void clearPathSetting() {
        System.clearProperty(Grows.PATH_PROPERTY);
    }

    @ParameterizedTest
    @CsvSource({"2, 3, reinit", "2, 3, nccl", "2, 3, auto", "3, 4, reinit", "3, 4, nccl", "3, 4, auto"})
    void existingAndNewRanksComputeExactlyAfterTheGrow(int from, int to, String path) throws Throwable {
        System.setProperty(Grows.PATH_PROPERTY, path);
        long seed = new Random().nextLong();
        List<Integer> all = IntStream.range(0, to).boxed().toList();
        ElasticRanks.Pack pack = new ElasticRanks.Pack(from);
        List<Object> results = run(from, to, pack, OPTIONS, (comm, handOut) -> {
            ElasticRanks.checkCollectives(comm, IntStream.range(0, from).boxed().toList(), seed); // healthy first
            GrowTicket ticket = comm.growTicket(to);
            assertSame(ticket, comm.growTicket(to), "a second ticket of the same size is the same");
            assertEquals(path.equals("reinit") ? GrowTicket.Path.REINIT : GrowTicket.Path.NCCL, ticket.path());
            handOut.complete(ticket);
            Communicator grown = comm.grow(ticket);
            assertEquals(comm.rank(), grown.rank(), "an existing rank keeps its rank");
            assertEquals(to, grown.worldSize());
            assertEquals(comm.device(), grown.device());
            assertSame(grown, comm.grow(ticket), "a second grow with the ticket returns the same communicator");
            assertTrue(comm.isAborted(), "the old communicator is retired after the grow");
            assertTrue(comm.abortReason().contains("grown to " + to + " ranks by the " + ticket.path().name()
                    .toLowerCase(java.util.Locale.ROOT) + " path"), comm.abortReason());
            ElasticRanks.checkCollectives(grown, all, seed + 1);
            ElasticRanks.checkCollectives(grown, all, seed + 2);
            return null;
        }, grown -> {
            ElasticRanks.checkCollectives(grown, all, seed + 1);
            ElasticRanks.checkCollectives(grown, all, seed + 2);
            return null;
        });
        rethrowAny(results);
    }

    @Test
    void aTicketCrossesProcessesAsBytes() {
        GrowTicket ticket = new GrowTicket(GrowTicket.Path.NCCL, 3, 5, UniqueId.generate());
        GrowTicket back = GrowTicket.fromBytes(ticket.bytes());
        assertEquals(ticket, back);
        assertEquals(3, back.fromWorld());
        assertEquals(5, back.toWorld());
        assertEquals(GrowTicket.Path.NCCL, back.path());
        assertNotEquals(ticket, new GrowTicket(GrowTicket.Path.NCCL, 3, 5, UniqueId.generate()));
        byte[] bytes = ticket.bytes();
        bytes[0] ^= 1;
        assertRefused(() -> GrowTicket.fromBytes(bytes), "not a jnccl grow ticket");
        assertRefused(() -> GrowTicket.fromBytes(new byte[7]), "7 bytes; a ticket has " + GrowTicket.BYTES);
        assertRefused(() -> GrowTicket.fromBytes(null), "bytes is null");
    }

    @Test
    void everyMisuseIsRefusedBeforeAnythingHappens() throws Throwable {
        GrowTicket foreign = new GrowTicket(GrowTicket.Path.REINIT, 2, 3, UniqueId.generate());
        List<Object> results = run(2, 2, new ElasticRanks.Pack(2), OPTIONS, (comm, handOut) -> {
            assertRefused(() -> comm.growTicket(2), "newWorldSize 2 out of range [3, ");
            assertRefused(() -> comm.growTicket(-1), "newWorldSize -1 out of range [3, ");
            assertRefused(() -> comm.grow(null), "ticket is null");
            assertRefused(() -> comm.grow(foreign), "which made none: call growTicket first");
            try (CudaStream stream = CudaStream.create(); Transaction open = comm.begin(stream)) {
                IllegalStateException refused = assertThrows(IllegalStateException.class, () -> comm.growTicket(3));
                assertTrue(refused.getMessage().contains("growTicket"), refused.getMessage());
            }
            GrowTicket ticket = comm.growTicket(3);
            assertRefused(() -> comm.grow(foreign), "whose ticket is " + ticket);
            IllegalStateException other = assertThrows(IllegalStateException.class, () -> comm.growTicket(4));
            assertTrue(other.getMessage().contains("already has the ticket of a grow to 3 ranks"), other.getMessage());
            assertFalse(comm.isAborted(), "refused calls change nothing");
            ElasticRanks.checkCollectives(comm, List.of(0, 1), 42);
            comm.barrier(); // neither rank closes while the other still waits in the all-gather
            comm.close();
            IllegalStateException closed = assertThrows(IllegalStateException.class, () -> comm.growTicket(5));
            assertTrue(closed.getMessage().contains("is closed"), closed.getMessage());
            return null;
        }, null);
        rethrowAny(results);
        // A system property is the JVM's, not a rank's: set where no other rank thread reads it meanwhile.
        try (Communicator single = Communicator.single(0, OPTIONS)) {
            System.setProperty(Grows.PATH_PROPERTY, "fast");
            assertRefused(() -> single.growTicket(2), "jnccl.grow.path is \"fast\"; allowed: auto, nccl, reinit");
        } finally {
            System.clearProperty(Grows.PATH_PROPERTY);
        }
        assertRefused(() -> Communicator.joinGrow(null, 2, 0, OPTIONS), "ticket is null");
        assertRefused(() -> Communicator.joinGrow(foreign, 1, 0, OPTIONS), "rank 1 out of range [2, 3)");
        assertRefused(() -> Communicator.joinGrow(foreign, 3, 0, OPTIONS), "rank 3 out of range [2, 3)");
        assertRefused(() -> Communicator.joinGrow(foreign, 2, 0, null), "options are null");
    }

    @Test
    void ncclsGrowIsRefusedBelow2292NamingBothVersions() {
        LoadedLibraries old = new LoadedLibraries(BackendSetting.CUDA, Path.of("libnccl.so.2"), Path.of("libcudart.so"),
                22803, 12080, 12080);
        UnsupportedOperationException refused = assertThrows(UnsupportedOperationException.class,
                () -> Shrinks.requireFeature("grow (jnccl.grow.path=nccl)", NcclFeature.GROW, old));
        assertTrue(refused.getMessage().contains("needs NCCL 2.29.2 or newer"), refused.getMessage());
        assertTrue(refused.getMessage().contains("the loaded NCCL is 2.28.3"), refused.getMessage());
    }

    @Test
    void aNewRankThatNeverComesEndsAtTheInitTimeout() throws Throwable {
        CommunicatorOptions quick = OPTIONS.withInitTimeout(Duration.ofSeconds(2));
        List<Object> results = run(2, 3, new ElasticRanks.Pack(2), quick, (comm, handOut) -> {
            GrowTicket ticket = comm.growTicket(3); // handed to nobody
            long start = System.nanoTime();
            CommunicatorAbortedException late = assertThrows(CommunicatorAbortedException.class,
                    () -> comm.grow(ticket));
            assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(20), "ended near the deadline");
            assertTrue(late.getMessage().contains("CommunicatorOptions.initTimeout"), late.getMessage());
            assertTrue(comm.isAborted(), "a failed grow leaves the old communicator retired");
            assertTrue(comm.abortReason().contains("grown to 3 ranks by the"), comm.abortReason());
            assertTrue(comm.abortReason().contains("failed"), comm.abortReason());
            return null;
        }, null);
        rethrowAny(results);
    }

    @Test
    void anInterruptDuringTheGrowEndsItPromptly() throws Throwable {
        List<Object> results = run(2, 3, new ElasticRanks.Pack(2), OPTIONS, (comm, handOut) -> {
            GrowTicket ticket = comm.growTicket(3); // the new rank never comes
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
                    () -> comm.grow(ticket));
            assertTrue(Thread.interrupted(), "the interrupt status is kept");
            assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(10), "ended promptly");
            assertTrue(interrupted.getMessage().contains("interrupted"), interrupted.getMessage());
            interrupter.join();
            assertTrue(comm.isAborted());
            return null;
        }, null);
        rethrowAny(results);
    }

    @Test
    void aSecondThreadIsRefusedWhileOneGrows() throws Throwable {
        List<Object> results = run(2, 3, new ElasticRanks.Pack(2), OPTIONS, (comm, handOut) -> {
            if (comm.rank() != 0) {
                return null; // never makes the ticket: rank 0's growTicket waits for it
            }
            Thread first = Thread.ofPlatform().start(() -> {
                try {
                    comm.growTicket(3);
                } catch (CommunicatorAbortedException expected) {
                    // interrupted below
                }
            });
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            while (first.getState() != Thread.State.TIMED_WAITING && System.nanoTime() < deadline) {
                Thread.sleep(5); // until the first call waits for rank 1
            }
            IllegalStateException refused = assertThrows(IllegalStateException.class, () -> comm.growTicket(3));
            assertTrue(refused.getMessage().contains("is already growing"), refused.getMessage());
            IllegalStateException alsoGrow = assertThrows(IllegalStateException.class,
                    () -> comm.grow(new GrowTicket(GrowTicket.Path.REINIT, 2, 3, UniqueId.generate())));
            assertTrue(alsoGrow.getMessage().contains("is already growing"), alsoGrow.getMessage());
            first.interrupt();
            first.join();
            return null;
        }, null);
        rethrowAny(results);
    }

    @Test
    void eachGrowIsRecordedAsAJfrEvent() throws Throwable {
        System.setProperty(Grows.PATH_PROPERTY, "reinit");
        Path file = Files.createTempFile("jnccl-grow-", ".jfr");
        try (Recording recording = new Recording()) {
            recording.enable("jnccl.Grow");
            recording.start();
            rethrowAny(run(2, 3, new ElasticRanks.Pack(2), OPTIONS, (comm, handOut) -> {
                GrowTicket ticket = comm.growTicket(3);
                handOut.complete(ticket);
                comm.grow(ticket);
                return null;
            }, grown -> null));
            recording.stop();
            recording.dump(file);
            List<RecordedEvent> events = RecordingFile.readAllEvents(file).stream()
                    .filter(e -> e.getEventType().getName().equals("jnccl.Grow")).toList();
            assertEquals(List.of(0, 1, 2), events.stream().map(e -> e.getInt("rank")).sorted().toList());
            for (RecordedEvent event : events) {
                assertEquals("reinit", event.getString("path"));
                assertEquals(2, event.getInt("fromWorld"));
                assertEquals(3, event.getInt("toWorld"));
            }
        } finally {
            Files.deleteIfExists(file);
        }
    }

    private static void assertRefused(org.junit.jupiter.api.function.Executable call, String expected) {
        IllegalArgumentException refused = assertThrows(IllegalArgumentException.class, call);
        assertTrue(refused.getMessage().contains(expected), refused.getMessage());
    }

    /**
     * Runs {@code existing} on {@code from} ranks of {@code pack} (rank r on device r) and, when
     * {@code joined} is given, new ranks {@code [from, to)} that join with the ticket the existing
     * ranks hand out and then run {@code joined} on the grown communicator. Returns each rank's
     * result or failure.
     */
    private static List<Object> run(int from, int to, ElasticRanks.Pack pack, CommunicatorOptions options,
                                    ExistingBody existing, java.util.function.Function<Communicator, Object> joined)
            throws Exception {
        UniqueId id = UniqueId.generate();
        CompletableFuture<GrowTicket> handOut = new CompletableFuture<>();
        ExecutorService pool = Executors.newFixedThreadPool(to);
        try {
            List<Future<Object>> futures = new ArrayList<>();
            for (int rank = 0; rank < from; rank++) {
                int r = rank;
                futures.add(pool.submit(() -> {
                    try (Communicator comm = ElasticRanks.create(id, pack, r, options)) {
                        return existing.run(comm, handOut);
                    } catch (Throwable t) {
                        return t;
                    }
                }));
            }
            for (int rank = from; joined != null && rank < to; rank++) {
                int r = rank;
                futures.add(pool.submit(() -> {
                    GrowTicket ticket = handOut.get(60, TimeUnit.SECONDS);
                    try (Communicator grown = Modes.joinGrow(ticket, r, r, options, pack.grown(ticket).parts(r))) {
                        assertEquals(r, grown.rank());
                        assertEquals(to, grown.worldSize());
                        return joined.apply(grown);
                    } catch (Throwable t) {
                        return t;
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
