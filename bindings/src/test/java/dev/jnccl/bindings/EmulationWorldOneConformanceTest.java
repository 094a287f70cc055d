package dev.jnccl.bindings;

import static dev.jnccl.bindings.EmulationSupport.assertCuda;
import static dev.jnccl.bindings.EmulationSupport.assertNccl;
import static dev.jnccl.bindings.EmulationSupport.cuda;
import static dev.jnccl.bindings.EmulationSupport.nccl;
import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.bindings.EmulationCollectives.Case;
import dev.jnccl.bindings.EmulationCollectives.Coll;
import dev.jnccl.bindings.EmulationSupport.DType;
import dev.jnccl.bindings.EmulationSupport.Op;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.cuda.cudaPointerAttributes;
import dev.jnccl.bindings.nccl.Nccl;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * World-1 conformance, on whatever backend the JVM resolved (host emulation on a CPU machine, real
 * CUDA + NCCL on a GPU one): every collective, type and op, in place and out of place, against the
 * Java reference; and the return codes of NCCL 2.28 for bad arguments (only those that real NCCL's
 * argument checks produce with default settings: see ArgsCheck / ncclCommInitRankDev of NCCL 2.28).
 * Nothing here assumes host memory or the emulation, so the same class is the cross-check on an H200.
 */
class EmulationWorldOneConformanceTest {
    private static MemorySegment comm;
    private static MemorySegment stream;
    private static LoadedLibraries libraries;

    @BeforeAll
    static void open() {
        libraries = EmulationSupport.libraries();
        System.out.println("world-1 conformance on " + libraries.describe());
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment id = EmulationSupport.newUniqueId(arena);
            comm = EmulationSupport.initRank(id, 1, 0, 0);
        }
        stream = EmulationSupport.newStream();
    }

    @AfterAll
    static void close() {
        if (comm != null) {
            nccl(Nccl.ncclCommFinalize(comm), "ncclCommFinalize");
            nccl(Nccl.ncclCommDestroy(comm), "ncclCommDestroy");
        }
        if (stream != null) {
            cuda(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
        }
    }

    @ParameterizedTest
    @EnumSource(DType.class)
    void everyCollectiveAndOpInAndOutOfPlaceMatchesTheReference(DType type) {
        if (type.isFp8()) {
            assumeTrue(libraries.supports(NcclFeature.FP8),
                    "NCCL " + VersionCodes.text(libraries.ncclVersion()) + " has no fp8 types");
        }
        List<Case> cases = EmulationCollectives.matrix(1, List.of(type), 0x5eed0000L + type.ordinal());
        List<String> problems = new ArrayList<>();
        int run = 0;
        for (Case c : cases) {
            if (type.isFp8() && c.op() == Op.AVG && libraries.backend() == BackendSetting.CUDA) {
                // Real NCCL (seen with 2.28.9 on an H200) answers ncclInvalidArgument here: on one rank
                // ncclAvg becomes a pre-multiplied sum run by ncclLaunchOneRank, whose host-side switch
                // only has the fp8 kernels under "__CUDA_ARCH__ >= 900", which is never true in host
                // code. With more ranks fp8 avg works, and the emulation computes it here too. Not
                // asserted either way: it is NCCL's quirk, not a contract.
                continue;
            }
            try (Arena arena = Arena.ofConfined()) {
                EmulationCollectives.Prepared p = EmulationCollectives.prepare(c, 1, arena);
                problems.addAll(EmulationCollectives.execute(p, 0, comm, stream));
                run++;
            }
        }
        assertTrue(problems.isEmpty(), () -> String.join("\n", problems));
        // Count the cases so a silently shrunken matrix cannot pass: 3 reductions x 5 ops x 2 + 3 x 2 + send/recv.
        assertEquals(3 * Op.values().length * 2 + 3 * 2 + 1, cases.size());
        assertTrue(run >= cases.size() - 6, "cases run: " + run);
    }

    @Test
    void communicatorAnswersItsQueries() {
        assertEquals(1, EmulationSupport.commInt(comm, "count"));
        assertEquals(0, EmulationSupport.commInt(comm, "rank"));
        assertEquals(0, EmulationSupport.commInt(comm, "device"));
        assertNccl(Nccl.ncclSuccess(), EmulationSupport.asyncError(comm), "ncclCommGetAsyncError");
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment id = EmulationSupport.newUniqueId(arena);
            assertNotEquals(-1L, id.mismatch(arena.allocate(id.byteSize())), "ncclGetUniqueId left the id all zero");
            MemorySegment other = EmulationSupport.newUniqueId(arena);
            assertNotEquals(-1L, id.mismatch(other), "two ncclGetUniqueId calls gave the same id");
            MemorySegment version = arena.allocate(JAVA_INT);
            nccl(Nccl.ncclGetVersion(version), "ncclGetVersion");
            assertEquals(libraries.ncclVersion(), VersionCodes.fromNccl(version.get(JAVA_INT, 0)));
        }
        // The emulation reports 2.28 and has ncclAlltoAll: the feature is both versioned and linked.
        assertTrue(NcclFeature.ALL_TO_ALL.isLinked(), "ncclAlltoAll not found in the loaded library");
        assertTrue(libraries.supports(NcclFeature.ALL_TO_ALL), "NCCL " + VersionCodes.text(libraries.ncclVersion()));
        for (NcclFeature rooted : new NcclFeature[] {NcclFeature.GATHER, NcclFeature.SCATTER}) {
            assertTrue(rooted.isLinked(), rooted + ": symbol not found in the loaded library");
            assertTrue(libraries.supports(rooted), rooted + " on NCCL " + VersionCodes.text(libraries.ncclVersion()));
        }
    }

    @Test
    void badArgumentsGetNcclsResultCodes() {
        int invalid = Nccl.ncclInvalidArgument();
        MemorySegment a = EmulationSupport.deviceMalloc(64);
        MemorySegment b = EmulationSupport.deviceMalloc(64);
        try (Arena arena = Arena.ofConfined()) {
            int f32 = Nccl.ncclFloat32();
            int sum = Nccl.ncclSum();
            for (int type : new int[] {-1, Nccl.ncclNumTypes(), 99}) {
                assertNccl(invalid, Nccl.ncclAllReduce(a, b, 4, type, sum, comm, stream), "ncclAllReduce datatype " + type);
                assertNccl(invalid, Nccl.ncclAllReduce(a, b, 0, type, sum, comm, stream), "ncclAllReduce count 0 datatype " + type);
                assertNccl(invalid, Nccl.ncclReduceScatter(a, b, 4, type, sum, comm, stream), "ncclReduceScatter datatype " + type);
                assertNccl(invalid, Nccl.ncclAllGather(a, b, 4, type, comm, stream), "ncclAllGather datatype " + type);
                assertNccl(invalid, Nccl.ncclBroadcast(a, b, 4, type, 0, comm, stream), "ncclBroadcast datatype " + type);
                assertNccl(invalid, Nccl.ncclReduce(a, b, 4, type, sum, 0, comm, stream), "ncclReduce datatype " + type);
                assertNccl(invalid, Nccl.ncclAlltoAll(a, b, 4, type, comm, stream), "ncclAlltoAll datatype " + type);
                // The same functions through the hot path's address-taking downcalls.
                long x = a.address();
                long y = b.address();
                assertNccl(invalid, NcclBufferCalls.ncclAllReduce(x, y, 4, type, sum, comm, stream), "ncclAllReduce (address) datatype " + type);
                assertNccl(invalid, NcclBufferCalls.ncclReduceScatter(x, y, 4, type, sum, comm, stream), "ncclReduceScatter (address) datatype " + type);
                assertNccl(invalid, NcclBufferCalls.ncclAllGather(x, y, 4, type, comm, stream), "ncclAllGather (address) datatype " + type);
                assertNccl(invalid, NcclBufferCalls.ncclBroadcast(x, y, 4, type, 0, comm, stream), "ncclBroadcast (address) datatype " + type);
                assertNccl(invalid, NcclBufferCalls.ncclReduce(x, y, 4, type, sum, 0, comm, stream), "ncclReduce (address) datatype " + type);
                assertNccl(invalid, NcclBufferCalls.ncclAlltoAll(x, y, 4, type, comm, stream), "ncclAlltoAll (address) datatype " + type);
                assertNccl(invalid, NcclBufferCalls.ncclGather(x, y, 4, type, 0, comm, stream), "ncclGather datatype " + type);
                assertNccl(invalid, NcclBufferCalls.ncclScatter(x, y, 4, type, 0, comm, stream), "ncclScatter datatype " + type);
                assertNccl(invalid, NcclBufferCalls.ncclSend(x, 4, type, 0, comm, stream), "ncclSend (address) datatype " + type);
                assertNccl(invalid, NcclBufferCalls.ncclRecv(y, 4, type, 0, comm, stream), "ncclRecv (address) datatype " + type);
                assertNccl(invalid, Nccl.ncclSend(a, 4, type, 0, comm, stream), "ncclSend datatype " + type);
                assertNccl(invalid, Nccl.ncclRecv(b, 4, type, 0, comm, stream), "ncclRecv datatype " + type);
            }
            for (int op : new int[] {-1, Nccl.ncclNumOps(), 99}) {
                assertNccl(invalid, Nccl.ncclAllReduce(a, b, 4, f32, op, comm, stream), "ncclAllReduce op " + op);
                assertNccl(invalid, Nccl.ncclReduceScatter(a, b, 4, f32, op, comm, stream), "ncclReduceScatter op " + op);
                assertNccl(invalid, Nccl.ncclReduce(a, b, 4, f32, op, 0, comm, stream), "ncclReduce op " + op);
            }
            for (int root : new int[] {-1, 1, 7}) {
                assertNccl(invalid, Nccl.ncclBroadcast(a, b, 4, f32, root, comm, stream), "ncclBroadcast root " + root);
                assertNccl(invalid, Nccl.ncclReduce(a, b, 4, f32, sum, root, comm, stream), "ncclReduce root " + root);
                assertNccl(invalid, Nccl.ncclSend(a, 4, f32, root, comm, stream), "ncclSend peer " + root);
                assertNccl(invalid, Nccl.ncclRecv(b, 4, f32, root, comm, stream), "ncclRecv peer " + root);
            }
            MemorySegment none = MemorySegment.NULL;
            assertNccl(invalid, Nccl.ncclAllReduce(a, b, 4, f32, sum, none, stream), "ncclAllReduce NULL comm");
            assertNccl(invalid, Nccl.ncclBroadcast(a, b, 4, f32, 0, none, stream), "ncclBroadcast NULL comm");
            assertNccl(invalid, Nccl.ncclSend(a, 4, f32, 0, none, stream), "ncclSend NULL comm");
            assertNccl(invalid, Nccl.ncclCommCount(none, arena.allocate(JAVA_INT)), "ncclCommCount NULL comm");
            assertNccl(invalid, Nccl.ncclCommCount(comm, none), "ncclCommCount NULL count");
            assertNccl(invalid, Nccl.ncclCommUserRank(comm, none), "ncclCommUserRank NULL rank");
            assertNccl(invalid, Nccl.ncclCommCuDevice(comm, none), "ncclCommCuDevice NULL device");
            assertNccl(invalid, Nccl.ncclCommGetAsyncError(comm, none), "ncclCommGetAsyncError NULL result");
            assertNccl(invalid, Nccl.ncclCommGetAsyncError(none, arena.allocate(JAVA_INT)), "ncclCommGetAsyncError NULL comm");
            assertNccl(invalid, Nccl.ncclGetVersion(none), "ncclGetVersion NULL");
            assertNccl(invalid, Nccl.ncclGetUniqueId(none), "ncclGetUniqueId NULL");
            assertNccl(Nccl.ncclInvalidUsage(), Nccl.ncclGroupEnd(), "ncclGroupEnd without ncclGroupStart");

            MemorySegment id = EmulationSupport.newUniqueId(arena);
            MemorySegment out = arena.allocate(ADDRESS);
            assertNccl(invalid, Nccl.ncclCommInitRank(out, 0, id, 0), "ncclCommInitRank nranks 0");
            assertNccl(invalid, Nccl.ncclCommInitRank(out, 1, id, 1), "ncclCommInitRank rank 1 of 1");
            assertNccl(invalid, Nccl.ncclCommInitRank(out, 1, id, -1), "ncclCommInitRank rank -1");
            assertNccl(invalid, Nccl.ncclCommInitRank(none, 1, id, 0), "ncclCommInitRank NULL newcomm");

            // None of that touched the communicator: no async error, and it still computes.
            assertNccl(Nccl.ncclSuccess(), EmulationSupport.asyncError(comm), "ncclCommGetAsyncError after rejections");
            Case c = new Case(Coll.ALL_REDUCE, DType.FLOAT32, Op.SUM, 5, false, 0, 42);
            EmulationCollectives.Prepared p = EmulationCollectives.prepare(c, 1, arena);
            List<String> problems = EmulationCollectives.execute(p, 0, comm, stream);
            assertTrue(problems.isEmpty(), () -> String.join("\n", problems));
        } finally {
            EmulationSupport.free(a);
            EmulationSupport.free(b);
        }
    }

    @Test
    void aRejectedCallInsideAGroupFailsTheGroupEndAndNothingElse() {
        MemorySegment a = EmulationSupport.deviceMalloc(64);
        MemorySegment b = EmulationSupport.deviceMalloc(64);
        try (Arena arena = Arena.ofConfined()) {
            nccl(Nccl.ncclGroupStart(), "ncclGroupStart");
            // (Whether this valid call still runs differs: real NCCL launches one-rank collectives at
            // once, the emulation drops the whole group. Only the return codes are the contract.)
            nccl(Nccl.ncclAllReduce(a, b, 4, Nccl.ncclFloat32(), Nccl.ncclSum(), comm, stream), "ncclAllReduce in the group");
            assertNccl(Nccl.ncclInvalidArgument(), Nccl.ncclAllReduce(a, b, 4, 77, Nccl.ncclSum(), comm, stream),
                    "ncclAllReduce with a bad type in the group");
            assertNccl(Nccl.ncclInvalidArgument(), Nccl.ncclGroupEnd(), "ncclGroupEnd of a group with a rejected call");
            cuda(CudaRuntime.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            assertNccl(Nccl.ncclSuccess(), EmulationSupport.asyncError(comm), "ncclCommGetAsyncError after the failed group");
            // The thread's group state was reset: a new group works.
            Case c = new Case(Coll.ALL_GATHER, DType.UINT64, null, 9, true, 0, 3);
            EmulationCollectives.Prepared p = EmulationCollectives.prepare(c, 1, arena);
            List<String> problems = EmulationCollectives.execute(p, 0, comm, stream);
            assertTrue(problems.isEmpty(), () -> String.join("\n", problems));
            assertNccl(Nccl.ncclInvalidUsage(), Nccl.ncclGroupEnd(), "a second ncclGroupEnd");
        } finally {
            EmulationSupport.free(a);
            EmulationSupport.free(b);
        }
    }

    @Test
    void zeroCountCollectivesAreDiscardedEvenWithNullBuffers() {
        // NCCL drops empty collectives after its argument checks (taskAppend: "Empty collectives can be
        // discarded"); pointers are only checked with NCCL_CHECK_POINTERS=1, which is off by default.
        MemorySegment none = MemorySegment.NULL;
        int f32 = Nccl.ncclFloat32();
        int ok = Nccl.ncclSuccess();
        assertNccl(ok, Nccl.ncclAllReduce(none, none, 0, f32, Nccl.ncclSum(), comm, stream), "ncclAllReduce count 0");
        assertNccl(ok, Nccl.ncclReduceScatter(none, none, 0, f32, Nccl.ncclMax(), comm, stream), "ncclReduceScatter count 0");
        assertNccl(ok, Nccl.ncclAllGather(none, none, 0, f32, comm, stream), "ncclAllGather count 0");
        assertNccl(ok, Nccl.ncclBroadcast(none, none, 0, f32, 0, comm, stream), "ncclBroadcast count 0");
        assertNccl(ok, Nccl.ncclReduce(none, none, 0, f32, Nccl.ncclAvg(), 0, comm, stream), "ncclReduce count 0");
        assertNccl(ok, Nccl.ncclAlltoAll(none, none, 0, f32, comm, stream), "ncclAlltoAll count 0");
        long nowhere = none.address();
        assertNccl(ok, NcclBufferCalls.ncclAllReduce(nowhere, nowhere, 0, f32, Nccl.ncclSum(), comm, stream), "ncclAllReduce (address) count 0");
        assertNccl(ok, NcclBufferCalls.ncclGather(nowhere, nowhere, 0, f32, 0, comm, stream), "ncclGather count 0");
        assertNccl(ok, NcclBufferCalls.ncclScatter(nowhere, nowhere, 0, f32, 0, comm, stream), "ncclScatter count 0");
        cuda(CudaRuntime.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
        assertNccl(ok, EmulationSupport.asyncError(comm), "ncclCommGetAsyncError after empty collectives");
    }

    @Test
    void collectivesOfOneGroupRunInOrder() {
        // A group of dependent collectives on one stream: all-reduce into B, then broadcast B into C.
        try (Arena arena = Arena.ofConfined()) {
            Case c = new Case(Coll.ALL_REDUCE, DType.INT32, Op.MAX, 4099, false, 0, 7);
            EmulationCollectives.Prepared p = EmulationCollectives.prepare(c, 1, arena);
            long bytes = p.send[0].byteSize();
            MemorySegment a = EmulationSupport.deviceMalloc(bytes);
            MemorySegment b = EmulationSupport.deviceMalloc(bytes);
            MemorySegment d = EmulationSupport.deviceMalloc(bytes);
            try {
                EmulationSupport.toDevice(a, p.send[0]);
                EmulationSupport.toDevice(b, p.recvInit[0]);
                EmulationSupport.toDevice(d, p.recvInit[0]);
                nccl(Nccl.ncclGroupStart(), "ncclGroupStart");
                nccl(Nccl.ncclAllReduce(a, b, c.count(), c.type().id, c.op().id, comm, stream), "ncclAllReduce");
                nccl(Nccl.ncclGroupEnd(), "ncclGroupEnd");
                nccl(Nccl.ncclBroadcast(b, d, c.count(), c.type().id, 0, comm, stream), "ncclBroadcast");
                cuda(CudaRuntime.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
                MemorySegment actual = arena.allocate(bytes);
                EmulationSupport.toHost(actual, d);
                List<String> problems = EmulationCollectives.compare("group then broadcast", c.type(), p.expected[0],
                        actual, 0, c.count());
                assertTrue(problems.isEmpty(), () -> String.join("\n", problems));
            } finally {
                EmulationSupport.free(a);
                EmulationSupport.free(b);
                EmulationSupport.free(d);
            }
        }
    }

    @Test
    void pointerAttributesAndEventsAnswerLikeCuda() {
        cuda(CudaRuntime.cudaSetDevice(0), "cudaSetDevice(0)");
        MemorySegment device = EmulationSupport.deviceMalloc(4096);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment attributes = cudaPointerAttributes.allocate(arena);
            cuda(CudaRuntime.cudaPointerGetAttributes(attributes, device), "cudaPointerGetAttributes(device)");
            assertEquals(CudaRuntime.cudaMemoryTypeDevice(), cudaPointerAttributes.type(attributes));
            assertEquals(0, cudaPointerAttributes.device(attributes));
            assertEquals(device.address(), cudaPointerAttributes.devicePointer(attributes).address());
            assertEquals(0L, cudaPointerAttributes.hostPointer(attributes).address(), "device memory has no host pointer");
            MemorySegment interior = MemorySegment.ofAddress(device.address() + 1000);
            cuda(CudaRuntime.cudaPointerGetAttributes(attributes, interior), "cudaPointerGetAttributes(interior)");
            assertEquals(CudaRuntime.cudaMemoryTypeDevice(), cudaPointerAttributes.type(attributes));
            assertEquals(interior.address(), cudaPointerAttributes.devicePointer(attributes).address());

            MemorySegment out = arena.allocate(ADDRESS);
            cuda(CudaRuntime.cudaMallocHost(out, 4096), "cudaMallocHost");
            MemorySegment pinned = out.get(ADDRESS, 0);
            try {
                cuda(CudaRuntime.cudaPointerGetAttributes(attributes, pinned), "cudaPointerGetAttributes(pinned)");
                assertEquals(CudaRuntime.cudaMemoryTypeHost(), cudaPointerAttributes.type(attributes));
                assertEquals(pinned.address(), cudaPointerAttributes.hostPointer(attributes).address());
            } finally {
                cuda(CudaRuntime.cudaFreeHost(pinned), "cudaFreeHost");
            }
            MemorySegment pageable = arena.allocate(4096);
            cuda(CudaRuntime.cudaPointerGetAttributes(attributes, pageable), "cudaPointerGetAttributes(pageable)");
            assertEquals(CudaRuntime.cudaMemoryTypeUnregistered(), cudaPointerAttributes.type(attributes));

            assertCuda(CudaRuntime.cudaErrorInvalidValue(), CudaRuntime.cudaMalloc(MemorySegment.NULL, 64), "cudaMalloc(NULL)");
            CudaRuntime.cudaGetLastError();

            MemorySegment timed = EmulationSupport.newEvent(CudaRuntime.cudaEventDefault());
            MemorySegment untimed = EmulationSupport.newEvent(CudaRuntime.cudaEventDisableTiming());
            try {
                MemorySegment ms = arena.allocate(java.lang.foreign.ValueLayout.JAVA_FLOAT);
                assertCuda(CudaRuntime.cudaSuccess(), CudaRuntime.cudaEventQuery(timed), "cudaEventQuery(never recorded)");
                assertCuda(CudaRuntime.cudaErrorInvalidResourceHandle(), CudaRuntime.cudaEventElapsedTime(ms, timed, timed),
                        "cudaEventElapsedTime(never recorded)");
                cuda(CudaRuntime.cudaEventRecord(timed, stream), "cudaEventRecord");
                cuda(CudaRuntime.cudaEventRecord(untimed, stream), "cudaEventRecord");
                cuda(CudaRuntime.cudaEventSynchronize(untimed), "cudaEventSynchronize");
                assertCuda(CudaRuntime.cudaSuccess(), CudaRuntime.cudaEventQuery(timed), "cudaEventQuery(recorded, done)");
                assertCuda(CudaRuntime.cudaErrorInvalidResourceHandle(), CudaRuntime.cudaEventElapsedTime(ms, timed, untimed),
                        "cudaEventElapsedTime with a cudaEventDisableTiming event");
                cuda(CudaRuntime.cudaEventElapsedTime(ms, timed, timed), "cudaEventElapsedTime(e, e)");
                assertEquals(0f, ms.get(java.lang.foreign.ValueLayout.JAVA_FLOAT, 0));
                CudaRuntime.cudaGetLastError();
            } finally {
                cuda(CudaRuntime.cudaEventDestroy(timed), "cudaEventDestroy");
                cuda(CudaRuntime.cudaEventDestroy(untimed), "cudaEventDestroy");
            }
        } finally {
            EmulationSupport.free(device);
        }
    }

    @Test
    void ncclMemAllocBuffersRegisterAndCarryCollectives() {
        assumeTrue(libraries.supports(NcclFeature.MEM_ALLOC_AND_REGISTER),
                "NCCL " + VersionCodes.text(libraries.ncclVersion()));
        try (Arena arena = Arena.ofConfined()) {
            Case c = new Case(Coll.ALL_REDUCE, DType.FLOAT64, Op.MIN, 2049, false, 0, 17);
            EmulationCollectives.Prepared p = EmulationCollectives.prepare(c, 1, arena);
            long bytes = p.send[0].byteSize();
            MemorySegment out = arena.allocate(ADDRESS);
            nccl(Nccl.ncclMemAlloc(out, bytes), "ncclMemAlloc");
            MemorySegment send = out.get(ADDRESS, 0);
            nccl(Nccl.ncclMemAlloc(out, bytes), "ncclMemAlloc");
            MemorySegment recv = out.get(ADDRESS, 0);
            MemorySegment handle = arena.allocate(ADDRESS);
            nccl(Nccl.ncclCommRegister(comm, send, bytes, handle), "ncclCommRegister");
            try {
                EmulationSupport.toDevice(send, p.send[0]);
                EmulationSupport.toDevice(recv, p.recvInit[0]);
                nccl(Nccl.ncclAllReduce(send, recv, c.count(), c.type().id, c.op().id, comm, stream), "ncclAllReduce");
                cuda(CudaRuntime.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
                MemorySegment actual = arena.allocate(bytes);
                EmulationSupport.toHost(actual, recv);
                List<String> problems = EmulationCollectives.compare("ncclMemAlloc buffers", c.type(), p.expected[0],
                        actual, 0, c.count());
                assertTrue(problems.isEmpty(), () -> String.join("\n", problems));
            } finally {
                nccl(Nccl.ncclCommDeregister(comm, handle.get(ADDRESS, 0)), "ncclCommDeregister");
                nccl(Nccl.ncclMemFree(send), "ncclMemFree");
                nccl(Nccl.ncclMemFree(recv), "ncclMemFree");
            }
        }
    }

    @Test
    void cudaRejectsDevicesThatDoNotExist() {
        int count = EmulationSupport.deviceCount();
        assertTrue(count >= 1, "cudaGetDeviceCount = " + count);
        assertCuda(CudaRuntime.cudaErrorInvalidDevice(), CudaRuntime.cudaSetDevice(count), "cudaSetDevice(" + count + ")");
        assertCuda(CudaRuntime.cudaErrorInvalidDevice(), CudaRuntime.cudaSetDevice(-1), "cudaSetDevice(-1)");
        CudaRuntime.cudaGetLastError(); // clear the recorded error for later tests
        cuda(CudaRuntime.cudaSetDevice(0), "cudaSetDevice(0)");
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment device = arena.allocate(JAVA_INT);
            cuda(CudaRuntime.cudaGetDevice(device), "cudaGetDevice");
            assertEquals(0, device.get(JAVA_INT, 0));
        }
    }
}
