package dev.jnccl.bindings;

import static dev.jnccl.bindings.EmulationSupport.assertNccl;
import static dev.jnccl.bindings.EmulationSupport.cuda;
import static dev.jnccl.bindings.EmulationSupport.nccl;
import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.bindings.EmulationCollectives.Case;
import dev.jnccl.bindings.EmulationCollectives.Coll;
import dev.jnccl.bindings.EmulationSupport.DType;
import dev.jnccl.bindings.EmulationSupport.Op;
import dev.jnccl.bindings.EmulationSupport.World;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.bindings.nccl.ncclUniqueId;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * ncclCommShrink, ncclCommRevoke, ncclCommGetUniqueId and ncclCommGrow of the host emulation
 * through {@link NcclElasticCalls}: ranks as threads that lose one rank mid-collective and shrink,
 * three ranks that grow to four, and a rank process that is SIGKILLed while the others' all-reduce
 * waits for it. Results on the new communicators are checked element by element against the Java
 * reference, with a fresh seed per run (printed).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class EmulationElasticTest {
    private static final Duration BOUND = Duration.ofSeconds(60);

    @BeforeAll
    static void hostOnly() {
        EmulationSupport.assumeHost();
    }

    @Test
    void theEmulationHasShrinkRevokeAndGrowThoughItReportsAnOlderNccl() {
        LoadedLibraries libraries = EmulationSupport.libraries();
        for (NcclFeature feature : List.of(NcclFeature.SHRINK, NcclFeature.REVOKE, NcclFeature.GROW)) {
            assertTrue(feature.isLinked(), feature + " linked");
            assertTrue(libraries.supports(feature), feature + " on " + libraries.describe());
        }
        // The version alone would say no: the emulation counts because it exports the functions.
        assertFalse(NcclFeature.GROW.isSupportedBy(libraries.ncclVersion()));
        assertFalse(NcclFeature.REVOKE.isSupportedBy(VersionCodes.of(2, 28, 6)));
        assertTrue(NcclFeature.REVOKE.isSupportedBy(VersionCodes.of(2, 28, 7)));
        assertEquals(VersionCodes.of(2, 27, 0), NcclFeature.SHRINK.sinceVersion());
        assertEquals(VersionCodes.of(2, 29, 2), NcclFeature.GROW.sinceVersion());
        LoadedLibraries realOld = new LoadedLibraries(BackendSetting.CUDA, libraries.ncclPath(), libraries.cudartPath(),
                VersionCodes.of(2, 28, 3), libraries.cudaRuntimeVersion(), libraries.cudaDriverVersion());
        assertTrue(realOld.supports(NcclFeature.SHRINK));
        assertFalse(realOld.supports(NcclFeature.REVOKE), "a real NCCL 2.28.3 has no ncclCommRevoke");
        assertFalse(realOld.supports(NcclFeature.GROW), "a real NCCL 2.28.3 has no ncclCommGrow");
    }

    @Test
    void survivorsShrinkAfterARankAbortsMidCollectiveThenRunCheckedCollectives() throws Exception {
        long seed = ThreadLocalRandom.current().nextLong();
        System.out.println("shrink seed " + seed);
        World world = new World(4);
        CountDownLatch posted = new CountDownLatch(3);
        List<List<String>> problems = world.run(BOUND, rank -> {
            MemorySegment comm = world.init(rank);
            if (rank == 3) { // aborts while the survivors' all-reduce waits for it
                assertTrue(posted.await(30, TimeUnit.SECONDS));
                Thread.sleep(30);
                nccl(Nccl.ncclCommAbort(comm), "ncclCommAbort(rank 3)");
                world.forget(rank);
                return List.of();
            }
            cuda(CudaRuntime.cudaSetDevice(rank), "cudaSetDevice");
            MemorySegment stream = EmulationSupport.newStream();
            MemorySegment buffer = EmulationSupport.deviceMalloc(4096);
            nccl(Nccl.ncclAllReduce(buffer, buffer, 1024, Nccl.ncclFloat32(), Nccl.ncclSum(), comm, stream), "ncclAllReduce");
            posted.countDown();
            cuda(CudaRuntime.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            EmulationSupport.free(buffer);
            assertEquals(Nccl.ncclRemoteError(), EmulationSupport.asyncError(comm), "rank " + rank + " async error");
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment out = arena.allocate(ADDRESS);
                // As NCCL: a default shrink of a parent in error fails; an aborting one succeeds.
                assertNccl(Nccl.ncclRemoteError(), shrink(comm, arena, out, NcclElasticCalls.NCCL_SHRINK_DEFAULT, 3),
                        "ncclCommShrink(default)");
                nccl(shrink(comm, arena, out, NcclElasticCalls.NCCL_SHRINK_ABORT, 3), "ncclCommShrink(abort)");
                nccl(Nccl.ncclCommAbort(comm), "ncclCommAbort(parent)");
                world.forget(rank);
                MemorySegment child = out.get(ADDRESS, 0);
                return runAndDestroy(child, 3, rank, seed, stream);
            }
        });
        problems.forEach(p -> assertTrue(p.isEmpty(), String.join("\n", p)));
    }

    @Test
    void threeRanksGrowToFourAndTheOldCommunicatorStaysUsable() throws Exception {
        long seed = ThreadLocalRandom.current().nextLong();
        System.out.println("grow seed " + seed);
        World world = new World(4);
        MemorySegment growId = ncclUniqueId.allocate(Arena.ofAuto());
        CyclicBarrier idReady = new CyclicBarrier(4);
        List<List<String>> problems = world.run(BOUND, rank -> {
            cuda(CudaRuntime.cudaSetDevice(rank), "cudaSetDevice");
            MemorySegment old = null;
            if (rank < 3) {
                old = EmulationSupport.initRank(world.id, 3, rank, rank);
                world.comms.set(rank, old);
                if (rank == 0) {
                    nccl(NcclElasticCalls.ncclCommGetUniqueId(old, growId), "ncclCommGetUniqueId");
                }
            }
            idReady.await(30, TimeUnit.SECONDS);
            MemorySegment stream = EmulationSupport.newStream();
            List<String> found = new ArrayList<>();
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment out = arena.allocate(ADDRESS);
                int result = old != null
                        ? NcclElasticCalls.ncclCommGrow(old, 4, growId, -1, out, MemorySegment.NULL)
                        : NcclElasticCalls.ncclCommGrow(MemorySegment.NULL, 4, growId, 3, out, MemorySegment.NULL);
                nccl(result, "ncclCommGrow(rank " + rank + ")");
                MemorySegment grown = out.get(ADDRESS, 0);
                assertEquals(4, EmulationSupport.commInt(grown, "count"));
                assertEquals(rank, EmulationSupport.commInt(grown, "rank"), "existing ranks keep their rank");
                found.addAll(checked(grown, 4, rank, seed, stream));
                nccl(Nccl.ncclCommDestroy(grown), "ncclCommDestroy(grown)");
            }
            if (old != null) {
                found.addAll(checked(old, 3, rank, seed + 1, stream));
                nccl(Nccl.ncclCommDestroy(old), "ncclCommDestroy(old)");
                world.forget(rank);
            }
            cuda(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
            return found;
        });
        problems.forEach(p -> assertTrue(p.isEmpty(), String.join("\n", p)));
    }

    @Test
    void aRankProcessKilledMidCollectiveIsShrunkAwayByTheOthers() throws Exception {
        // Ranks 0 and 1 are threads of this JVM, rank 2 a child JVM that joins and waits; it is
        // SIGKILLed while the threads' all-reduce waits for it, and the threads shrink without it.
        long seed = ThreadLocalRandom.current().nextLong();
        System.out.println("killed-process seed " + seed);
        World world = new World(3);
        Path log = Files.createTempFile("jnccl-killed-rank-", ".log");
        Process child = EmulationProcessWorldTest.start(log, EmulationRankProcess.class, EmulationSupport.hex(world.id),
                "3", "2", "1", "wait-after-init");
        CountDownLatch posted = new CountDownLatch(2);
        try {
            Thread killer = Thread.ofPlatform().daemon().start(() -> {
                try {
                    if (posted.await(60, TimeUnit.SECONDS)) {
                        Thread.sleep(30);
                        child.destroyForcibly(); // SIGKILL
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            World pair = new World(2);
            List<List<String>> problems = pair.run(BOUND, rank -> {
                MemorySegment comm = EmulationSupport.initRank(world.id, 3, rank, rank);
                pair.comms.set(rank, comm);
                MemorySegment stream = EmulationSupport.newStream();
                MemorySegment buffer = EmulationSupport.deviceMalloc(4096);
                nccl(Nccl.ncclAllReduce(buffer, buffer, 1024, Nccl.ncclFloat32(), Nccl.ncclSum(), comm, stream),
                        "ncclAllReduce");
                posted.countDown();
                cuda(CudaRuntime.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
                EmulationSupport.free(buffer);
                String text = EmulationSupport.asyncError(comm) == Nccl.ncclRemoteError() ? EmulationSupport.lastError(comm)
                        : "async error " + EmulationSupport.asyncError(comm);
                assertTrue(text.contains("rank 2") && text.contains("exited"), "rank " + rank + ": " + text);
                try (Arena arena = Arena.ofConfined()) {
                    MemorySegment out = arena.allocate(ADDRESS);
                    nccl(shrink(comm, arena, out, NcclElasticCalls.NCCL_SHRINK_ABORT, 2), "ncclCommShrink(abort)");
                    nccl(Nccl.ncclCommAbort(comm), "ncclCommAbort(parent)");
                    pair.forget(rank);
                    return runAndDestroy(out.get(ADDRESS, 0), 2, rank, seed, stream);
                }
            });
            killer.join(10_000);
            assertTrue(child.waitFor(30, TimeUnit.SECONDS), "the rank process was not killed");
            assertTrue(Files.readString(log).contains("rank 2 joined"), Files.readString(log));
            problems.forEach(p -> assertTrue(p.isEmpty(), String.join("\n", p)));
        } finally {
            child.destroyForcibly();
            Files.deleteIfExists(log);
        }
    }

    /** ncclCommShrink of comm without the given ranks; the child goes to out. */
    private static int shrink(MemorySegment comm, Arena arena, MemorySegment out, int flags, int... excluded) {
        MemorySegment list = arena.allocateFrom(JAVA_INT, excluded);
        return NcclElasticCalls.ncclCommShrink(comm, list, excluded.length, out, MemorySegment.NULL, flags);
    }

    /** Checks the child's numbering, runs checked collectives, destroys child and stream. */
    private static List<String> runAndDestroy(MemorySegment child, int n, int rank, long seed, MemorySegment stream) {
        assertEquals(n, EmulationSupport.commInt(child, "count"), "survivors' communicator size");
        assertEquals(rank, EmulationSupport.commInt(child, "rank"), "the survivors keep their order");
        List<String> problems = checked(child, n, rank, seed, stream);
        nccl(Nccl.ncclCommDestroy(child), "ncclCommDestroy(child)");
        cuda(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
        return problems;
    }

    /** An all-reduce, an all-gather and a broadcast of random data, checked element by element. */
    private static List<String> checked(MemorySegment comm, int n, int rank, long seed, MemorySegment stream) {
        List<Case> cases = List.of(
                new Case(Coll.ALL_REDUCE, DType.FLOAT32, Op.SUM, 10_007, false, 0, seed),
                new Case(Coll.ALL_GATHER, DType.INT64, null, 501, true, 0, seed + 1),
                new Case(Coll.BROADCAST, DType.BFLOAT16, null, 3001, false, n - 1, seed + 2));
        List<String> problems = new ArrayList<>();
        for (Case c : cases) {
            try (Arena arena = Arena.ofConfined()) {
                problems.addAll(EmulationCollectives.execute(EmulationCollectives.prepare(c, n, arena), rank, comm,
                        stream));
            }
        }
        return problems;
    }
}
