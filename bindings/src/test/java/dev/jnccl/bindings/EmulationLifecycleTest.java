package dev.jnccl.bindings;

import static dev.jnccl.bindings.EmulationSupport.cuda;
import static dev.jnccl.bindings.EmulationSupport.nccl;
import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.bindings.EmulationCollectives.Case;
import dev.jnccl.bindings.EmulationCollectives.Coll;
import dev.jnccl.bindings.EmulationCollectives.Prepared;
import dev.jnccl.bindings.EmulationSupport.DType;
import dev.jnccl.bindings.EmulationSupport.Op;
import dev.jnccl.bindings.EmulationSupport.World;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.bindings.nccl.ncclConfig_t;
import dev.jnccl.bindings.nccl.ncclUniqueId;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Communicator life cycles on the host emulation: 1000 create / use / destroy cycles without growth
 * in threads, file descriptors, shared-memory segments or mappings; non-blocking initialisation;
 * ncclCommSplit.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class EmulationLifecycleTest {

    @BeforeAll
    static void hostOnly() {
        EmulationSupport.assumeHost();
    }

    record Snapshot(int threads, int fds, Set<String> shm, int shmMappings) {
        static Snapshot take() {
            return new Snapshot(EmulationSupport.threadCount(), EmulationSupport.fdCount(),
                    EmulationSupport.shmSegments(), countShmMappings());
        }

        static int countShmMappings() {
            try (Stream<String> lines = Files.lines(Path.of("/proc/self/maps"))) {
                return (int) lines.filter(line -> line.contains("/dev/shm/jnccl-")).count();
            } catch (IOException e) {
                throw new AssertionError(e);
            }
        }
    }

    @Test
    void aThousandCreateDestroyCyclesLeakNoThreadsFdsOrSharedMemory() throws Exception {
        int n = 2;
        int warmUp = 20;
        int cycles = 1000;
        World world = new World(n);
        MemorySegment id = ncclUniqueId.allocate(Arena.ofAuto());
        Snapshot[] before = new Snapshot[1];
        Snapshot[] after = new Snapshot[1];
        int[] cycle = {0};
        // The barrier action runs between cycles, when every communicator and stream of the previous
        // cycle is destroyed and both rank threads are alive: the two snapshots see the same JVM
        // threads of this test.
        CyclicBarrier barrier = new CyclicBarrier(n, () -> {
            if (cycle[0] == warmUp) {
                before[0] = Snapshot.take();
            }
            if (cycle[0] == warmUp + cycles) {
                after[0] = settled(before[0]);
            }
            cycle[0]++;
            nccl(Nccl.ncclGetUniqueId(id), "ncclGetUniqueId");
        });
        long t0 = System.nanoTime();
        world.run(Duration.ofSeconds(100), rank -> {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment host = arena.allocate(JAVA_INT);
                MemorySegment buffer = EmulationSupport.deviceMalloc(4);
                for (int i = 0; i <= warmUp + cycles; i++) {
                    barrier.await(30, TimeUnit.SECONDS);
                    if (i == warmUp + cycles) {
                        break;
                    }
                    MemorySegment comm = EmulationSupport.initRank(id, n, rank, rank);
                    world.comms.set(rank, comm);
                    MemorySegment stream = EmulationSupport.newStream();
                    host.set(JAVA_INT, 0, i * 10 + rank + 1);
                    EmulationSupport.toDevice(buffer, host);
                    nccl(Nccl.ncclAllReduce(buffer, buffer, 1, Nccl.ncclInt32(), Nccl.ncclSum(), comm, stream), "ncclAllReduce");
                    cuda(CudaRuntime.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
                    EmulationSupport.toHost(host, buffer);
                    assertEquals(2 * i * 10 + 3, host.get(JAVA_INT, 0), "cycle " + i);
                    if (i % 2 == 0) {
                        nccl(Nccl.ncclCommFinalize(comm), "ncclCommFinalize");
                    }
                    nccl(Nccl.ncclCommDestroy(comm), "ncclCommDestroy");
                    world.forget(rank);
                    cuda(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
                }
                EmulationSupport.free(buffer);
            }
            return null;
        });
        long seconds = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - t0);
        System.out.println("create/destroy: " + cycles + " cycles of world " + n + " in " + seconds + " s; before " + before[0]
                + ", after " + after[0]);
        Snapshot b = before[0];
        Snapshot a = after[0];
        // Threads: the JVM starts some of its own threads lazily (C1/C2 compiler threads under
        // UseDynamicNumberOfCompilerThreads, G1 refinement / GC workers), so a few may appear while
        // the loop warms up the JIT. A leak of the emulation's stream workers or proxy threads would
        // add one or more per cycle (>= 1000), far beyond this tolerance.
        assertTrue(a.threads() <= b.threads() + 4, "threads grew from " + b.threads() + " to " + a.threads());
        // File descriptors: nothing of the JVM opens files in this loop; a small margin for class loading.
        assertTrue(a.fds() <= b.fds() + 2, "file descriptors grew from " + b.fds() + " to " + a.fds());
        Set<String> left = new TreeSet<>(a.shm());
        left.removeAll(b.shm());
        assertTrue(left.isEmpty(), "/dev/shm segments left behind: " + left);
        assertTrue(a.shmMappings() <= b.shmMappings(), "mappings of /dev/shm/jnccl-* grew from " + b.shmMappings()
                + " to " + a.shmMappings());
    }

    /** Waits (up to 5 s) for threads that finish asynchronously after their destroy call, then snapshots. */
    private static Snapshot settled(Snapshot before) {
        EmulationSupport.await(Duration.ofSeconds(5), () -> {
            Snapshot now = Snapshot.take();
            return now.threads() <= before.threads() && now.fds() <= before.fds();
        });
        return Snapshot.take();
    }

    @Test
    void nonBlockingInitOfFourRanksFromOneThreadCompletesByPolling() throws Exception {
        // With blocking init, one thread creating all four ranks would wait forever in the first call.
        int n = 4;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment id = EmulationSupport.newUniqueId(arena);
            MemorySegment config = NcclConfigs.allocate(arena);
            ncclConfig_t.blocking(config, 0);
            MemorySegment[] comms = new MemorySegment[n];
            MemorySegment out = arena.allocate(ADDRESS);
            for (int r = 0; r < n; r++) {
                cuda(CudaRuntime.cudaSetDevice(r), "cudaSetDevice");
                int rc = Nccl.ncclCommInitRankConfig(out, n, id, r, config);
                assertTrue(rc == Nccl.ncclInProgress() || rc == Nccl.ncclSuccess(),
                        "ncclCommInitRankConfig (non-blocking) rank " + r + ": " + EmulationSupport.ncclText(rc));
                comms[r] = out.get(ADDRESS, 0);
                assertTrue(!comms[r].equals(MemorySegment.NULL), "no communicator handle for rank " + r);
            }
            // The first ranks cannot be ready before the last one joined.
            assertTrue(pollReady(comms, Duration.ofSeconds(15)), "non-blocking init did not complete");
            for (int r = 0; r < n; r++) {
                assertEquals(r, EmulationSupport.commInt(comms[r], "rank"));
                assertEquals(r, EmulationSupport.commInt(comms[r], "device"));
                assertEquals(n, EmulationSupport.commInt(comms[r], "count"));
            }

            // A grouped all-reduce of all four ranks from this thread; non-blocking calls may answer
            // ncclInProgress, completion is then polled.
            Case c = new Case(Coll.ALL_REDUCE, DType.BFLOAT16, Op.AVG, 999, false, 0, 4242);
            Prepared p = EmulationCollectives.prepare(c, n, arena);
            MemorySegment[] streams = new MemorySegment[n];
            MemorySegment[] send = new MemorySegment[n];
            MemorySegment[] recv = new MemorySegment[n];
            for (int r = 0; r < n; r++) {
                cuda(CudaRuntime.cudaSetDevice(r), "cudaSetDevice");
                streams[r] = EmulationSupport.newStream();
                send[r] = EmulationSupport.deviceMalloc(p.send[r].byteSize());
                recv[r] = EmulationSupport.deviceMalloc(p.recvInit[r].byteSize());
                EmulationSupport.toDevice(send[r], p.send[r]);
            }
            nccl(Nccl.ncclGroupStart(), "ncclGroupStart");
            for (int r = 0; r < n; r++) {
                int rc = Nccl.ncclAllReduce(send[r], recv[r], c.count(), c.type().id, c.op().id, comms[r], streams[r]);
                assertTrue(rc == Nccl.ncclSuccess() || rc == Nccl.ncclInProgress(), "ncclAllReduce: " + EmulationSupport.ncclText(rc));
            }
            int end = Nccl.ncclGroupEnd();
            assertTrue(end == Nccl.ncclSuccess() || end == Nccl.ncclInProgress(), "ncclGroupEnd: " + EmulationSupport.ncclText(end));
            assertTrue(pollReady(comms, Duration.ofSeconds(15)), "the grouped all-reduce was not enqueued");
            List<String> problems = new ArrayList<>();
            for (int r = 0; r < n; r++) {
                cuda(CudaRuntime.cudaStreamSynchronize(streams[r]), "cudaStreamSynchronize");
                MemorySegment actual = arena.allocate(p.recvInit[r].byteSize());
                EmulationSupport.toHost(actual, recv[r]);
                problems.addAll(EmulationCollectives.compare("non-blocking rank " + r, c.type(), p.expected[r], actual, 0, c.count()));
            }
            assertTrue(problems.isEmpty(), () -> String.join("\n", problems));
            // Non-blocking finalize: ncclInProgress (or ncclSuccess), then polled to ncclSuccess.
            for (int r = 0; r < n; r++) {
                int rc = Nccl.ncclCommFinalize(comms[r]);
                assertTrue(rc == Nccl.ncclSuccess() || rc == Nccl.ncclInProgress(), "ncclCommFinalize: " + EmulationSupport.ncclText(rc));
            }
            assertTrue(pollReady(comms, Duration.ofSeconds(15)), "non-blocking finalize did not complete");
            for (int r = 0; r < n; r++) {
                int rc = Nccl.ncclCommDestroy(comms[r]);
                assertTrue(rc == Nccl.ncclSuccess() || rc == Nccl.ncclInProgress(), "ncclCommDestroy: " + EmulationSupport.ncclText(rc));
                cuda(CudaRuntime.cudaStreamDestroy(streams[r]), "cudaStreamDestroy");
                EmulationSupport.free(send[r]);
                EmulationSupport.free(recv[r]);
            }
        }
    }

    @Test
    void abortingAnInitThatNeverCompletesLeavesNothingBehind() throws Exception {
        // Rank 0 of a world of 2 starts a non-blocking init; rank 1 never comes. The init stays in
        // progress until ncclCommAbort, which must end it and free its thread and segment.
        Snapshot before = Snapshot.take();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment id = EmulationSupport.newUniqueId(arena);
            MemorySegment config = NcclConfigs.allocate(arena);
            ncclConfig_t.blocking(config, 0);
            MemorySegment out = arena.allocate(ADDRESS);
            cuda(CudaRuntime.cudaSetDevice(0), "cudaSetDevice");
            int rc = Nccl.ncclCommInitRankConfig(out, 2, id, 0, config);
            assertEquals(Nccl.ncclInProgress(), rc, "non-blocking init of a world whose other rank never comes: "
                    + EmulationSupport.ncclText(rc));
            MemorySegment comm = out.get(ADDRESS, 0);
            Thread.sleep(200);
            assertEquals(Nccl.ncclInProgress(), EmulationSupport.asyncError(comm), "still waiting for rank 1");
            assertEquals(1, EmulationSupport.shmSegments().size() - before.shm().size(), "the rendezvous segment exists meanwhile");
            int aborted = EmulationSupport.withinTime(Duration.ofSeconds(10), "ncclCommAbort during init",
                    () -> Nccl.ncclCommAbort(comm));
            assertEquals(Nccl.ncclSuccess(), aborted, "ncclCommAbort: " + EmulationSupport.ncclText(aborted));
        }
        Snapshot after = settled(before);
        assertTrue(after.threads() <= before.threads(), "threads: " + before.threads() + " -> " + after.threads());
        assertEquals(before.shm(), after.shm(), "/dev/shm after the aborted init");
        assertEquals(before.shmMappings(), after.shmMappings(), "mappings of /dev/shm/jnccl-*");
    }

    /** Polls ncclCommGetAsyncError until every comm is ncclSuccess; only ncclInProgress is acceptable meanwhile. */
    private static boolean pollReady(MemorySegment[] comms, Duration limit) {
        return EmulationSupport.await(limit, () -> {
            boolean all = true;
            for (MemorySegment comm : comms) {
                int state = EmulationSupport.asyncError(comm);
                if (state != Nccl.ncclSuccess() && state != Nccl.ncclInProgress()) {
                    throw new AssertionError("async error while polling: " + EmulationSupport.ncclText(state) + ": "
                            + EmulationSupport.lastError(comm));
                }
                all &= state == Nccl.ncclSuccess();
            }
            return all;
        });
    }

    @Test
    void splitIntoEvenAndOddRanksAndReduceOnEachHalf() throws Exception {
        int n = 4;
        World world = new World(n);
        List<String> failures = new ArrayList<>();
        List<List<String>> results = world.run(Duration.ofSeconds(60), rank -> {
            MemorySegment comm = world.init(rank);
            MemorySegment stream = EmulationSupport.newStream();
            List<String> problems = new ArrayList<>();
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment out = arena.allocate(ADDRESS);
                // Colour = parity; key = n - rank, so each half is ordered by descending parent rank.
                nccl(Nccl.ncclCommSplit(comm, rank % 2, n - rank, out, MemorySegment.NULL), "ncclCommSplit");
                MemorySegment half = out.get(ADDRESS, 0);
                int expectedRank = rank < 2 ? 1 : 0; // {0,2} -> 2 is 0, 0 is 1; {1,3} -> 3 is 0, 1 is 1
                assertEquals(2, EmulationSupport.commInt(half, "count"), "size of the half of rank " + rank);
                assertEquals(expectedRank, EmulationSupport.commInt(half, "rank"), "rank in the half of rank " + rank);
                assertEquals(rank, EmulationSupport.commInt(half, "device"), "device of the half of rank " + rank);

                // An all-reduce on each half: int64 sum of the two members' values.
                MemorySegment host = arena.allocate(8 * 513L);
                for (int i = 0; i < 513; i++) {
                    host.setAtIndex(java.lang.foreign.ValueLayout.JAVA_LONG, i, value(rank, i));
                }
                MemorySegment buffer = EmulationSupport.deviceMalloc(host.byteSize());
                EmulationSupport.toDevice(buffer, host);
                nccl(Nccl.ncclAllReduce(buffer, buffer, 513, Nccl.ncclInt64(), Nccl.ncclSum(), half, stream), "ncclAllReduce on the half");
                cuda(CudaRuntime.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
                EmulationSupport.toHost(host, buffer);
                int partner = (rank + 2) % n;
                for (int i = 0; i < 513; i++) {
                    long expected = value(rank, i) + value(partner, i);
                    long actual = host.getAtIndex(java.lang.foreign.ValueLayout.JAVA_LONG, i);
                    if (expected != actual && problems.size() < 5) {
                        problems.add("rank " + rank + " element " + i + ": expected " + expected + " but was " + actual);
                    }
                }
                EmulationSupport.free(buffer);

                // The parent still works alongside its children (same stream, in order)...
                Case c = new Case(Coll.ALL_GATHER, DType.INT32, null, 77, false, 0, 555);
                try (Arena shared = Arena.ofConfined()) {
                    Prepared p = EmulationCollectives.prepare(c, n, shared);
                    problems.addAll(EmulationCollectives.execute(p, rank, comm, stream));
                }
                // ...and NCCL_SPLIT_NOCOLOR leaves a rank out: ranks 0..2 form a world of 3, rank 3 gets NULL.
                int color = rank == 3 ? Nccl.NCCL_SPLIT_NOCOLOR() : 7;
                nccl(Nccl.ncclCommSplit(comm, color, rank, out, MemorySegment.NULL), "ncclCommSplit NOCOLOR");
                MemorySegment three = out.get(ADDRESS, 0);
                if (rank == 3) {
                    assertEquals(MemorySegment.NULL, three, "NCCL_SPLIT_NOCOLOR must give a NULL communicator");
                } else {
                    assertEquals(3, EmulationSupport.commInt(three, "count"));
                    assertEquals(rank, EmulationSupport.commInt(three, "rank"));
                    nccl(Nccl.ncclCommDestroy(three), "ncclCommDestroy(three)");
                }
                nccl(Nccl.ncclCommDestroy(half), "ncclCommDestroy(half)");
            }
            nccl(Nccl.ncclCommDestroy(comm), "ncclCommDestroy");
            world.forget(rank);
            cuda(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
            return problems;
        });
        results.forEach(failures::addAll);
        assertTrue(failures.isEmpty(), () -> String.join("\n", failures));
    }

    private static long value(int rank, int i) {
        return (rank + 1) * 1_000_003L * (i + 1) ^ 0x5DEECE66DL;
    }
}
