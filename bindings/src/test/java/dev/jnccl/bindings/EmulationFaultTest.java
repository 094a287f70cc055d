package dev.jnccl.bindings;

import static dev.jnccl.bindings.EmulationSupport.assertCuda;
import static dev.jnccl.bindings.EmulationSupport.assertNccl;
import static dev.jnccl.bindings.EmulationSupport.cuda;
import static dev.jnccl.bindings.EmulationSupport.nccl;
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
import dev.jnccl.testsupport.NativeEnv;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Fault injection of the host emulation (JNCCL_HOST_FAULT / _RANK / _AT, read when a communicator
 * is created): a rank that hangs at its k-th operation until ncclCommAbort, a rank whose k-th
 * operation fails with ncclSystemError, and a rank slowed by JNCCL_HOST_DELAY_RANK. Every blocking
 * call runs under a time bound, so a regression fails the test instead of hanging the suite.
 */
@Timeout(value = 90, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class EmulationFaultTest {
    private static final Duration BOUND = Duration.ofSeconds(10);

    @BeforeAll
    static void hostOnly() {
        EmulationSupport.assumeHost();
    }

    /** Communicators and streams of a world, created while the given variables are set. */
    private static void create(World world, MemorySegment[] comms, MemorySegment[] streams, String... env)
            throws Exception {
        try (NativeEnv _ = NativeEnv.set(env)) {
            world.run(Duration.ofSeconds(30), rank -> {
                comms[rank] = world.init(rank);
                return null;
            });
        }
        // Streams are created after the variables are gone (the delay variables would apply to them).
        for (int r = 0; r < world.size; r++) {
            cuda(CudaRuntime.cudaSetDevice(r), "cudaSetDevice");
            streams[r] = EmulationSupport.newStream();
        }
    }

    /** Every rank runs the case's all-reduce once and checks the result. */
    private static void allReduceAndCheck(World world, MemorySegment[] comms, MemorySegment[] streams, long seed)
            throws Exception {
        Case c = new Case(Coll.ALL_REDUCE, DType.FLOAT32, Op.SUM, 1001, false, 0, seed);
        try (Arena arena = Arena.ofShared()) {
            Prepared p = EmulationCollectives.prepare(c, world.size, arena);
            List<List<String>> problems = world.run(Duration.ofSeconds(30), rank ->
                    EmulationCollectives.execute(p, rank, comms[rank], streams[rank]));
            problems.forEach(list -> assertTrue(list.isEmpty(), () -> String.join("\n", list)));
        }
    }

    @Test
    void abortReleasesAHungCollectiveAndThePeersSeeARemoteError() throws Exception {
        int n = 3;
        World world = new World(n);
        MemorySegment[] comms = new MemorySegment[n];
        MemorySegment[] streams = new MemorySegment[n];
        create(world, comms, streams, "JNCCL_HOST_FAULT", "hang", "JNCCL_HOST_FAULT_RANK", "1", "JNCCL_HOST_FAULT_AT", "2");
        MemorySegment[] buffers = new MemorySegment[n];
        try {
            allReduceAndCheck(world, comms, streams, 11); // operation 1 of every rank: fine
            // Operation 2: rank 1 hangs in it, so the others wait for rank 1 inside the collective.
            for (int r = 0; r < n; r++) {
                buffers[r] = EmulationSupport.deviceMalloc(4 * 1024);
                nccl(Nccl.ncclAllReduce(buffers[r], buffers[r], 1024, Nccl.ncclFloat32(), Nccl.ncclSum(), comms[r],
                        streams[r]), "ncclAllReduce #2 rank " + r);
            }
            Thread.sleep(200);
            for (int r = 0; r < n; r++) {
                assertCuda(CudaRuntime.cudaErrorNotReady(), CudaRuntime.cudaStreamQuery(streams[r]),
                        "cudaStreamQuery of rank " + r + " while rank 1 hangs");
                assertNccl(Nccl.ncclSuccess(), EmulationSupport.asyncError(comms[r]), "async error of rank " + r + " while hung");
            }

            // Another thread (this one) aborts the hung rank.
            int aborted = EmulationSupport.withinTime(BOUND, "ncclCommAbort(rank 1)", () -> Nccl.ncclCommAbort(comms[1]));
            assertNccl(Nccl.ncclSuccess(), aborted, "ncclCommAbort(rank 1)");
            world.forget(1);
            comms[1] = null;
            // Its stream becomes idle.
            EmulationSupport.withinTime(BOUND, "cudaStreamSynchronize(rank 1)", () ->
                    CudaRuntime.cudaStreamSynchronize(streams[1]));
            assertCuda(CudaRuntime.cudaSuccess(), CudaRuntime.cudaStreamQuery(streams[1]), "cudaStreamQuery(rank 1) after abort");

            // The peers, blocked with the aborted rank, end with ncclRemoteError and idle streams.
            for (int r : new int[] {0, 2}) {
                MemorySegment comm = comms[r];
                boolean remote = EmulationSupport.await(BOUND,
                        () -> EmulationSupport.asyncError(comm) == Nccl.ncclRemoteError());
                assertTrue(remote, "rank " + r + " async error after the abort of rank 1: "
                        + EmulationSupport.ncclText(EmulationSupport.asyncError(comm)));
                int rank = r;
                EmulationSupport.withinTime(BOUND, "cudaStreamSynchronize(rank " + r + ")", () ->
                        CudaRuntime.cudaStreamSynchronize(streams[rank]));
            }
            // ...and can be aborted (rank 0). Like real NCCL, ncclCommDestroy refuses a communicator
            // with an asynchronous error (returns it, frees nothing); ncclCommAbort releases it.
            assertNccl(Nccl.ncclSuccess(), EmulationSupport.withinTime(BOUND, "ncclCommAbort(rank 0)",
                    () -> Nccl.ncclCommAbort(comms[0])), "ncclCommAbort(rank 0)");
            world.forget(0);
            comms[0] = null;
            int destroyed = EmulationSupport.withinTime(BOUND, "ncclCommDestroy(rank 2)", () -> Nccl.ncclCommDestroy(comms[2]));
            assertNccl(Nccl.ncclRemoteError(), destroyed, "ncclCommDestroy(rank 2) after the remote error");
            assertNccl(Nccl.ncclSuccess(), EmulationSupport.withinTime(BOUND, "ncclCommAbort(rank 2)",
                    () -> Nccl.ncclCommAbort(comms[2])), "ncclCommAbort(rank 2)");
            world.forget(2);
            comms[2] = null;
        } finally {
            world.abortAll();
            for (int r = 0; r < n; r++) {
                if (streams[r] != null) {
                    cuda(CudaRuntime.cudaStreamDestroy(streams[r]), "cudaStreamDestroy");
                }
                if (buffers[r] != null) {
                    EmulationSupport.free(buffers[r]);
                }
            }
        }
    }

    @Test
    void anInjectedFailureIsAnAsyncSystemErrorThatSaysSo() throws Exception {
        int n = 2;
        World world = new World(n);
        MemorySegment[] comms = new MemorySegment[n];
        MemorySegment[] streams = new MemorySegment[n];
        create(world, comms, streams, "JNCCL_HOST_FAULT", "fail", "JNCCL_HOST_FAULT_RANK", "1", "JNCCL_HOST_FAULT_AT", "3");
        MemorySegment[] buffers = new MemorySegment[n];
        try {
            allReduceAndCheck(world, comms, streams, 21); // operation 1
            allReduceAndCheck(world, comms, streams, 22); // operation 2
            for (int r = 0; r < n; r++) {
                assertNccl(Nccl.ncclSuccess(), EmulationSupport.asyncError(comms[r]), "async error before the fault");
            }
            for (int r = 0; r < n; r++) { // operation 3: a broadcast from rank 0
                buffers[r] = EmulationSupport.deviceMalloc(4 * 256);
                nccl(Nccl.ncclBroadcast(buffers[r], buffers[r], 256, Nccl.ncclFloat32(), 0, comms[r], streams[r]),
                        "ncclBroadcast #3 rank " + r);
            }
            boolean failed = EmulationSupport.await(BOUND,
                    () -> EmulationSupport.asyncError(comms[1]) == Nccl.ncclSystemError());
            assertTrue(failed, "rank 1's async error after its 3rd operation: "
                    + EmulationSupport.ncclText(EmulationSupport.asyncError(comms[1])));
            String text = EmulationSupport.lastError(comms[1]);
            assertTrue(text.contains("injected failure at operation 3 of rank 1"), "ncclGetLastError: " + text);
            // Rank 0, waiting for rank 1 inside the broadcast, stops with a remote error that says why.
            boolean remote = EmulationSupport.await(BOUND,
                    () -> EmulationSupport.asyncError(comms[0]) == Nccl.ncclRemoteError());
            assertTrue(remote, "rank 0's async error after rank 1 failed: "
                    + EmulationSupport.ncclText(EmulationSupport.asyncError(comms[0])));
            String peerText = EmulationSupport.lastError(comms[0]);
            assertTrue(peerText.contains("rank 1") && peerText.contains("injected failure"), "rank 0's error text: " + peerText);
            // A failed communicator answers new operations with its error (NCCL's ncclCommEnsureReady).
            assertNccl(Nccl.ncclSystemError(), Nccl.ncclAllReduce(buffers[1], buffers[1], 256, Nccl.ncclFloat32(),
                    Nccl.ncclSum(), comms[1], streams[1]), "ncclAllReduce on the failed communicator");
            // The failed operation ends: rank 1's stream drains.
            EmulationSupport.withinTime(BOUND, "cudaStreamSynchronize(rank 1)", () ->
                    CudaRuntime.cudaStreamSynchronize(streams[1]));
        } finally {
            for (int r = 0; r < n; r++) {
                int rank = r;
                if (comms[r] != null) {
                    assertNccl(Nccl.ncclSuccess(), EmulationSupport.withinTime(BOUND, "ncclCommAbort(rank " + r + ")",
                            () -> Nccl.ncclCommAbort(comms[rank])), "ncclCommAbort(rank " + r + ")");
                    world.forget(r);
                }
                EmulationSupport.withinTime(BOUND, "cudaStreamSynchronize", () ->
                        CudaRuntime.cudaStreamSynchronize(streams[rank]));
                cuda(CudaRuntime.cudaStreamDestroy(streams[r]), "cudaStreamDestroy");
                if (buffers[r] != null) {
                    EmulationSupport.free(buffers[r]);
                }
            }
        }
    }

    @Test
    void aDelayedRankSlowsItsCollectivesButNotItsStreams() throws Exception {
        int n = 2;
        int delayMs = 400;
        World world = new World(n);
        MemorySegment[] comms = new MemorySegment[n];
        MemorySegment[] streams = new MemorySegment[n];
        create(world, comms, streams, "JNCCL_HOST_DELAY_US", Integer.toString(delayMs * 1000), "JNCCL_HOST_DELAY_RANK", "1");
        try {
            long t0 = System.nanoTime();
            allReduceAndCheck(world, comms, streams, 31);
            long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
            assertTrue(ms >= delayMs, "an all-reduce with a delayed rank 1 took only " + ms + " ms");
            // The delay belongs to rank 1's communicator, not to streams: a copy is fast.
            List<Long> copyMs = new ArrayList<>();
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment a = EmulationSupport.deviceMalloc(1024);
                MemorySegment host = arena.allocate(1024);
                long t1 = System.nanoTime();
                cuda(CudaRuntime.cudaMemcpyAsync(a, host, 1024, CudaRuntime.cudaMemcpyHostToDevice(), streams[1]), "copy");
                cuda(CudaRuntime.cudaStreamSynchronize(streams[1]), "sync");
                copyMs.add(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t1));
                EmulationSupport.free(a);
            }
            assertTrue(copyMs.get(0) < delayMs, "a memcpy on rank 1's stream took " + copyMs.get(0) + " ms");
        } finally {
            for (int r = 0; r < n; r++) {
                nccl(Nccl.ncclCommDestroy(comms[r]), "ncclCommDestroy");
                world.forget(r);
                cuda(CudaRuntime.cudaStreamDestroy(streams[r]), "cudaStreamDestroy");
            }
        }
        assertEquals(n, comms.length);
    }
}
