package dev.jnccl.bindings;

import static dev.jnccl.bindings.EmulationSupport.assertNccl;
import static dev.jnccl.bindings.EmulationSupport.cuda;
import static dev.jnccl.bindings.EmulationSupport.nccl;
import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.bindings.EmulationCollectives.Case;
import dev.jnccl.bindings.EmulationCollectives.Coll;
import dev.jnccl.bindings.EmulationCollectives.Data;
import dev.jnccl.bindings.EmulationCollectives.Prepared;
import dev.jnccl.bindings.EmulationSupport.DType;
import dev.jnccl.bindings.EmulationSupport.Op;
import dev.jnccl.bindings.EmulationSupport.World;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.testsupport.LowPrecision;
import dev.jnccl.testsupport.NativeEnv;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Host emulation, ranks as platform threads of this JVM (each with its own cudaSetDevice and
 * ncclCommInitRank on one shared by-value unique id): every collective, type and op of worlds 1, 2,
 * 3, 4 and 8 against the Java reference, in place and out of place, odd counts and sizes above the
 * emulation's staging chunk; low-precision extremes (saturation, infinity, NaN); the legacy stream.
 */
@Timeout(value = 240, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class EmulationWorldsTest {
    /**
     * The emulation's default staging chunk in bytes (JNCCL_HOST_CHUNK_BYTES, README.md of
     * bindings/src/main/c). Large cases move
     * 1.5 chunks per rank buffer so that every collective runs through several chunks.
     */
    static final long STAGING_CHUNK_BYTES = 1L << 20;

    @BeforeAll
    static void hostOnly() {
        EmulationSupport.assumeHost();
    }

    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {1, 2, 3, 4, 8})
    void everyCollectiveTypeAndOpMatchesTheReference(int n) throws Exception {
        List<Case> cases = new ArrayList<>(EmulationCollectives.matrix(n, List.of(DType.values()), 1000L * n));
        cases.addAll(largeCases(n, 77L * n));
        List<String> problems = runCases(n, cases, Duration.ofSeconds(120));
        assertTrue(problems.isEmpty(), () -> problems.size() + " problems, first ones:\n"
                + String.join("\n", problems.subList(0, Math.min(40, problems.size()))));
    }

    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {3, 4})
    void everyCollectiveStillMatchesWithATinyStagingChunk(int n) throws Exception {
        // JNCCL_HOST_CHUNK_BYTES (read at communicator creation) at its minimum: most cases of the
        // matrix then take many rounds, with a partial last one.
        List<Case> cases = EmulationCollectives.matrix(n, List.of(DType.values()), 5000L * n);
        List<String> problems;
        try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_CHUNK_BYTES", "4096")) {
            problems = runCases(n, cases, Duration.ofSeconds(120));
        }
        assertTrue(problems.isEmpty(), () -> problems.size() + " problems, first ones:\n"
                + String.join("\n", problems.subList(0, Math.min(40, problems.size()))));
    }

    @Test
    void twoWorldsOnTheSameDevicesRunAtTheSameTime() throws Exception {
        // Two independent worlds of 4 ranks on devices 0..3, each with its own threads, communicators
        // and streams, run their matrices concurrently: no cross-talk through devices or segments.
        List<DType> types = List.of(DType.FLOAT32, DType.BFLOAT16, DType.INT8, DType.UINT64);
        List<Case> first = EmulationCollectives.matrix(4, types, 11);
        List<Case> second = EmulationCollectives.matrix(4, types, 22);
        java.util.concurrent.FutureTask<List<String>> other = new java.util.concurrent.FutureTask<>(
                () -> runCases(4, second, Duration.ofSeconds(100)));
        Thread.ofPlatform().daemon().name("second-world").start(other);
        List<String> problems = new ArrayList<>(runCases(4, first, Duration.ofSeconds(100)));
        problems.addAll(other.get(100, TimeUnit.SECONDS));
        assertTrue(problems.isEmpty(), () -> String.join("\n", problems.subList(0, Math.min(40, problems.size()))));
    }

    /** Cases whose buffers exceed the staging chunk, with an odd element count. */
    static List<Case> largeCases(int n, long seed) {
        Random random = new Random(seed);
        List<Case> cases = new ArrayList<>();
        // A per-rank buffer of ~1.5 chunks (for all-gather / all-to-all / reduce-scatter the
        // n-fold buffer is larger still): two rounds, the second one partial.
        long floats = (STAGING_CHUNK_BYTES * 3 / 2) / 4 + 1;
        long perPeer = Math.max(1, floats / n) | 1;
        for (boolean inPlace : new boolean[] {false, true}) {
            int root = n - 1;
            cases.add(new Case(Coll.ALL_REDUCE, DType.FLOAT32, Op.SUM, floats, inPlace, 0, random.nextLong()));
            cases.add(new Case(Coll.ALL_REDUCE, DType.BFLOAT16, Op.AVG, 2 * floats + 1, inPlace, 0, random.nextLong()));
            cases.add(new Case(Coll.ALL_REDUCE, DType.INT8, Op.SUM, 4 * floats + 3, inPlace, 0, random.nextLong()));
            cases.add(new Case(Coll.REDUCE_SCATTER, DType.INT32, Op.MAX, perPeer, inPlace, 0, random.nextLong()));
            cases.add(new Case(Coll.REDUCE_SCATTER, DType.FP8E4M3, Op.SUM, 4 * perPeer + 1, inPlace, 0, random.nextLong()));
            cases.add(new Case(Coll.ALL_GATHER, DType.FLOAT64, null, perPeer / 2 + 1, inPlace, 0, random.nextLong()));
            cases.add(new Case(Coll.BROADCAST, DType.UINT32, null, floats, inPlace, root, random.nextLong()));
            cases.add(new Case(Coll.REDUCE, DType.FLOAT16, Op.PROD, 2 * floats + 1, inPlace, root, random.nextLong()));
            cases.add(new Case(Coll.ALL_TO_ALL, DType.INT64, null, perPeer / 2 + 1, inPlace, 0, random.nextLong()));
        }
        cases.add(new Case(Coll.SEND_RECV, DType.UINT8, null, 4 * floats + 1, false, 0, random.nextLong()));
        return cases;
    }

    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {2, 3})
    void lowPrecisionExtremesSaturateOverflowAndKeepNaN(int n) throws Exception {
        // Inputs at the types' largest finite values, their negatives and NaN: fp8 saturates (sums of
        // 448 stay 448), fp16 / bf16 / fp32 overflow to infinity, NaN propagates through sum / prod /
        // avg and loses in max / min (fmaxf).
        Random random = new Random(31L * n);
        List<Case> cases = new ArrayList<>();
        for (DType type : List.of(DType.FP8E4M3, DType.FP8E5M2, DType.FLOAT16, DType.BFLOAT16, DType.FLOAT32)) {
            for (Op op : Op.values()) {
                cases.add(new Case(Coll.ALL_REDUCE, type, op, 999, false, 0, random.nextLong(), Data.EXTREMES));
                cases.add(new Case(Coll.REDUCE_SCATTER, type, op, 257, true, 0, random.nextLong(), Data.EXTREMES));
                cases.add(new Case(Coll.REDUCE, type, op, 301, false, n - 1, random.nextLong(), Data.EXTREMES));
            }
        }
        List<String> problems = runCases(n, cases, Duration.ofSeconds(60));
        assertTrue(problems.isEmpty(), () -> String.join("\n", problems.subList(0, Math.min(40, problems.size()))));
    }

    @Test
    void referenceModelsSaturationAndRoundingExactly() {
        // The Java reference itself, on hand-computed values (so that a wrong reference cannot make
        // the emulation look right).
        long e4m3Max = 0x7E;
        assertEquals(e4m3Max, EmulationSupport.reduce(DType.FP8E4M3, Op.SUM, new long[] {0x7E, 0x7E}, 2) & 0xFF);
        assertEquals(0x7B, EmulationSupport.reduce(DType.FP8E5M2, Op.SUM, new long[] {0x7B, 0x7B}, 2) & 0xFF);
        assertEquals(0x7C00, EmulationSupport.reduce(DType.FLOAT16, Op.SUM, new long[] {0x7BFF, 0x7BFF}, 2) & 0xFFFF);
        // 1 + 2^-8 in bf16 rounds to even (1.0); 1 + 3*2^-8 rounds up.
        assertEquals(0x3F80, LowPrecision.floatToBf16(1f + 0x1p-8f) & 0xFFFF);
        assertEquals(0x3F82, LowPrecision.floatToBf16(1f + 3 * 0x1p-8f) & 0xFFFF);
        // e4m3: 1.0625 is halfway between 1 and 1.125 -> 1 (even); 1.1875 -> 1.25.
        assertEquals(0x38, LowPrecision.floatToE4m3(1.0625f));
        assertEquals(0x3A, LowPrecision.floatToE4m3(1.1875f));
        assertEquals(0.001953125f, LowPrecision.e4m3ToFloat((byte) 0x01)); // smallest subnormal 2^-9
        assertTrue(Float.isNaN(LowPrecision.e4m3ToFloat((byte) 0x7F)));
        assertEquals(Float.POSITIVE_INFINITY, LowPrecision.e5m2ToFloat((byte) 0x7C));
        assertEquals(0x7E, LowPrecision.floatToE4m3(Float.POSITIVE_INFINITY));
        for (int b = 0; b < 256; b++) {
            float e4 = LowPrecision.e4m3ToFloat((byte) b);
            if (!Float.isNaN(e4)) {
                assertEquals((byte) b, LowPrecision.floatToE4m3(e4), "e4m3 round trip of " + b);
            }
            float e5 = LowPrecision.e5m2ToFloat((byte) b);
            if (!Float.isNaN(e5) && !Float.isInfinite(e5)) {
                assertEquals((byte) b, LowPrecision.floatToE5m2(e5), "e5m2 round trip of " + b);
            }
        }
        // Integer avg: wrapped sum / n, truncating: int8 100 + 100 + 100 = 300 -> 44 -> 44 / 3 = 14.
        assertEquals(14, EmulationSupport.reduce(DType.INT8, Op.AVG, new long[] {100, 100, 100}, 3));
        assertEquals(-14, EmulationSupport.reduce(DType.INT8, Op.AVG, new long[] {-100, -100, -100}, 3));
        // uint64 max compares unsigned.
        assertEquals(-1L, EmulationSupport.reduce(DType.UINT64, Op.MAX, new long[] {5, -1L}, 2));
    }

    /**
     * Runs the cases on a world of n rank threads, each rank in lock step (one barrier per case whose
     * action draws the inputs and the reference results once for all ranks). Returns the mismatches.
     */
    static List<String> runCases(int n, List<Case> cases, Duration limit) throws Exception {
        World world = new World(n);
        Prepared[] current = new Prepared[1];
        Arena[] arena = new Arena[1];
        int[] next = {0};
        long[] prepareNanos = {0};
        long start = System.nanoTime();
        CyclicBarrier barrier = new CyclicBarrier(n, () -> {
            long t0 = System.nanoTime();
            if (arena[0] != null) {
                arena[0].close();
                arena[0] = null;
            }
            current[0] = null;
            if (next[0] < cases.size()) {
                arena[0] = Arena.ofShared();
                current[0] = EmulationCollectives.prepare(cases.get(next[0]++), n, arena[0]);
            }
            prepareNanos[0] += System.nanoTime() - t0;
        });
        List<List<String>> perRank = world.run(limit, rank -> {
            MemorySegment comm = world.init(rank);
            MemorySegment stream = EmulationSupport.newStream();
            List<String> problems = new ArrayList<>();
            assertEquals(n, EmulationSupport.commInt(comm, "count"));
            assertEquals(rank, EmulationSupport.commInt(comm, "rank"));
            assertEquals(rank, EmulationSupport.commInt(comm, "device"));
            for (int i = 0; i < cases.size(); i++) {
                barrier.await(limit.toSeconds(), TimeUnit.SECONDS);
                problems.addAll(EmulationCollectives.execute(current[0], rank, comm, stream));
            }
            barrier.await(limit.toSeconds(), TimeUnit.SECONDS);
            nccl(Nccl.ncclCommFinalize(comm), "ncclCommFinalize");
            nccl(Nccl.ncclCommDestroy(comm), "ncclCommDestroy");
            world.forget(rank);
            cuda(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
            return problems;
        });
        System.out.printf("world %d: %d cases in %d ms (%d ms of it computing inputs and references in Java)%n", n,
                cases.size(), TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start),
                TimeUnit.NANOSECONDS.toMillis(prepareNanos[0]));
        List<String> all = new ArrayList<>();
        perRank.forEach(all::addAll);
        return all;
    }

    @Test
    void ncclInitAllMakesOneCommunicatorPerDeviceOfOneThread() throws Exception {
        // ncclCommInitAll from one thread, then a grouped all-reduce over all four ranks from that thread.
        int n = 4;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment comms = arena.allocate(ADDRESS, n);
            MemorySegment devices = arena.allocateFrom(JAVA_INT, 3, 2, 1, 0);
            nccl(Nccl.ncclCommInitAll(comms, n, devices), "ncclCommInitAll");
            Case c = new Case(Coll.ALL_REDUCE, DType.FLOAT32, Op.SUM, 1023, false, 0, 99);
            Prepared p = EmulationCollectives.prepare(c, n, arena);
            MemorySegment[] streams = new MemorySegment[n];
            MemorySegment[] send = new MemorySegment[n];
            MemorySegment[] recv = new MemorySegment[n];
            for (int r = 0; r < n; r++) {
                MemorySegment comm = comms.getAtIndex(ADDRESS, r);
                assertEquals(r, EmulationSupport.commInt(comm, "rank"));
                assertEquals(3 - r, EmulationSupport.commInt(comm, "device"), "device of rank " + r);
                cuda(CudaRuntime.cudaSetDevice(3 - r), "cudaSetDevice");
                streams[r] = EmulationSupport.newStream();
                send[r] = EmulationSupport.deviceMalloc(p.send[r].byteSize());
                recv[r] = EmulationSupport.deviceMalloc(p.recvInit[r].byteSize());
                EmulationSupport.toDevice(send[r], p.send[r]);
            }
            nccl(Nccl.ncclGroupStart(), "ncclGroupStart");
            for (int r = 0; r < n; r++) {
                nccl(Nccl.ncclAllReduce(send[r], recv[r], c.count(), c.type().id, c.op().id, comms.getAtIndex(ADDRESS, r),
                        streams[r]), "ncclAllReduce rank " + r);
            }
            nccl(Nccl.ncclGroupEnd(), "ncclGroupEnd");
            List<String> problems = new ArrayList<>();
            for (int r = 0; r < n; r++) {
                cuda(CudaRuntime.cudaStreamSynchronize(streams[r]), "cudaStreamSynchronize");
                MemorySegment actual = arena.allocate(p.recvInit[r].byteSize());
                EmulationSupport.toHost(actual, recv[r]);
                problems.addAll(EmulationCollectives.compare("InitAll rank " + r, c.type(), p.expected[r], actual, 0, c.count()));
            }
            for (int r = 0; r < n; r++) {
                nccl(Nccl.ncclCommDestroy(comms.getAtIndex(ADDRESS, r)), "ncclCommDestroy");
                cuda(CudaRuntime.cudaStreamDestroy(streams[r]), "cudaStreamDestroy");
                EmulationSupport.free(send[r]);
                EmulationSupport.free(recv[r]);
            }
            assertTrue(problems.isEmpty(), () -> String.join("\n", problems));
        }
    }

    @Test
    void legacyStreamCopiesButRefusesNcclOperations() {
        // The emulation's documented choice for stream 0: memcpy / memset follow the legacy stream's
        // semantics (synchronous after draining the device's blocking streams); NCCL on it is refused.
        cuda(CudaRuntime.cudaSetDevice(0), "cudaSetDevice");
        MemorySegment legacy = MemorySegment.NULL;
        int bytes = 4096;
        MemorySegment a = EmulationSupport.deviceMalloc(bytes);
        MemorySegment b = EmulationSupport.deviceMalloc(bytes);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment host = arena.allocate(bytes);
            Random random = new Random(5);
            for (int i = 0; i < bytes; i++) {
                host.set(java.lang.foreign.ValueLayout.JAVA_BYTE, i, (byte) (random.nextInt(255) + 1));
            }
            cuda(CudaRuntime.cudaMemcpyAsync(a, host, bytes, CudaRuntime.cudaMemcpyHostToDevice(), legacy), "cudaMemcpyAsync H2D on stream 0");
            cuda(CudaRuntime.cudaMemcpyAsync(b, a, bytes, CudaRuntime.cudaMemcpyDeviceToDevice(), legacy), "cudaMemcpyAsync D2D on stream 0");
            MemorySegment back = arena.allocate(bytes);
            cuda(CudaRuntime.cudaMemcpyAsync(back, b, bytes, CudaRuntime.cudaMemcpyDeviceToHost(), legacy), "cudaMemcpyAsync D2H on stream 0");
            cuda(CudaRuntime.cudaStreamSynchronize(legacy), "cudaStreamSynchronize(0)");
            assertEquals(-1L, host.mismatch(back), "data through stream 0");
            cuda(CudaRuntime.cudaMemsetAsync(b, 0x5A, bytes, legacy), "cudaMemsetAsync on stream 0");
            cuda(CudaRuntime.cudaMemcpy(back, b, bytes, CudaRuntime.cudaMemcpyDeviceToHost()), "cudaMemcpy");
            for (int i = 0; i < bytes; i++) {
                assertEquals((byte) 0x5A, back.get(java.lang.foreign.ValueLayout.JAVA_BYTE, i), "memset byte " + i);
            }

            MemorySegment id = EmulationSupport.newUniqueId(arena);
            MemorySegment comm = EmulationSupport.initRank(id, 1, 0, 0);
            try {
                assertNccl(Nccl.ncclInvalidUsage(), Nccl.ncclAllReduce(a, b, 16, Nccl.ncclFloat32(), Nccl.ncclSum(), comm, legacy),
                        "ncclAllReduce on stream 0");
                assertTrue(!EmulationSupport.lastError(comm).isBlank(), "ncclGetLastError explains the refusal");
                assertNccl(Nccl.ncclInvalidUsage(), Nccl.ncclBroadcast(a, b, 16, Nccl.ncclFloat32(), 0, comm, legacy),
                        "ncclBroadcast on stream 0");
            } finally {
                nccl(Nccl.ncclCommDestroy(comm), "ncclCommDestroy");
            }
        } finally {
            EmulationSupport.free(a);
            EmulationSupport.free(b);
        }
    }

    @Test
    void nullBuffersAndForeignPointersAreRejected() {
        // The emulation checks pointers like NCCL with NCCL_CHECK_POINTERS=1 (host-only: real NCCL
        // does not check them by default).
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment id = EmulationSupport.newUniqueId(arena);
            MemorySegment comm = EmulationSupport.initRank(id, 1, 0, 0);
            MemorySegment stream = EmulationSupport.newStream();
            MemorySegment a = EmulationSupport.deviceMalloc(64);
            try {
                int f32 = Nccl.ncclFloat32();
                int invalid = Nccl.ncclInvalidArgument();
                assertNccl(invalid, Nccl.ncclAllReduce(MemorySegment.NULL, a, 4, f32, Nccl.ncclSum(), comm, stream), "NULL sendbuff");
                assertNccl(invalid, Nccl.ncclAllReduce(a, MemorySegment.NULL, 4, f32, Nccl.ncclSum(), comm, stream), "NULL recvbuff");
                assertNccl(invalid, Nccl.ncclBroadcast(a, MemorySegment.NULL, 4, f32, 0, comm, stream), "NULL broadcast recvbuff");
                assertNccl(invalid, Nccl.ncclAllReduce(a, a, 1000, f32, Nccl.ncclSum(), comm, stream), "count beyond the allocation");
                MemorySegment hostMemory = arena.allocate(64);
                assertNccl(invalid, Nccl.ncclAllReduce(hostMemory, a, 4, f32, Nccl.ncclSum(), comm, stream), "pageable host sendbuff");
                assertNccl(Nccl.ncclSuccess(), EmulationSupport.asyncError(comm), "no async error after rejections");
            } finally {
                EmulationSupport.free(a);
                nccl(Nccl.ncclCommDestroy(comm), "ncclCommDestroy");
                cuda(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
            }
        }
    }
}
