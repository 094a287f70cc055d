package dev.jnccl.bindings;

import static dev.jnccl.bindings.EmulationSupport.cuda;
import static dev.jnccl.bindings.EmulationSupport.nccl;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.bindings.EmulationSupport.DType;
import dev.jnccl.bindings.EmulationSupport.World;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Groups of many sends and receives: every rank sends distinct random buffers (two messages of
 * different sizes and types per ordered pair, matched in posting order, plus one to itself) to
 * every rank and receives from every rank inside one group, all sends posted before all receives
 * (which would deadlock without NCCL's group semantics). Also: mismatched sizes become an async
 * ncclInvalidUsage.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class EmulationGroupP2pTest {

    @BeforeAll
    static void hostOnly() {
        EmulationSupport.assumeHost();
    }

    /** Elements of message m (0 or 1) from rank `from` to rank `to`: different for every pair, odd, some large. */
    static long count(int from, int to, int m, int n) {
        long base = 1 + 37L * from + 11L * to + m * 5L;
        return (from + to + m) % 5 == 0 ? base + 270_001 : base; // a few exceed the staging chunk
    }

    static DType type(int m) {
        return m == 0 ? DType.FLOAT32 : DType.INT8;
    }

    /** The payload of a message, a function of (from, to, m), so the receiver can check it. */
    static MemorySegment payload(Arena arena, int from, int to, int m, int n) {
        DType t = type(m);
        long count = count(from, to, m, n);
        MemorySegment data = arena.allocate(count * t.size, 16);
        Random random = new Random(((long) from << 40) ^ ((long) to << 20) ^ m ^ 0x9e3779b97f4a7c15L);
        for (long i = 0; i < count; i++) {
            t.set(data, i, t.random(random));
        }
        return data;
    }

    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {4, 8})
    void everyRankSendsToAndReceivesFromEveryRankInOneGroup(int n) throws Exception {
        World world = new World(n);
        List<List<String>> results = world.run(Duration.ofSeconds(100), rank -> {
            MemorySegment comm = world.init(rank);
            MemorySegment stream = EmulationSupport.newStream();
            List<String> problems = new ArrayList<>();
            try (Arena arena = Arena.ofConfined()) {
                for (int round = 0; round < 3; round++) { // the same group three times: no state left behind
                    MemorySegment[][] sendBuf = new MemorySegment[n][2];
                    MemorySegment[][] recvBuf = new MemorySegment[n][2];
                    for (int peer = 0; peer < n; peer++) {
                        for (int m = 0; m < 2; m++) {
                            MemorySegment data = payload(arena, rank, peer, m, n);
                            sendBuf[peer][m] = EmulationSupport.deviceMalloc(data.byteSize());
                            EmulationSupport.toDevice(sendBuf[peer][m], data);
                            recvBuf[peer][m] = EmulationSupport.deviceMalloc(count(peer, rank, m, n) * type(m).size);
                            // Zero is never a payload value: unwritten elements show.
                            cuda(CudaRuntime.cudaMemsetAsync(recvBuf[peer][m], 0, count(peer, rank, m, n) * type(m).size,
                                    stream), "cudaMemsetAsync");
                        }
                    }
                    nccl(Nccl.ncclGroupStart(), "ncclGroupStart");
                    for (int k = 1; k <= n; k++) { // every peer, starting with the next rank, ending with self
                        int peer = (rank + k) % n;
                        for (int m = 0; m < 2; m++) {
                            nccl(Nccl.ncclSend(sendBuf[peer][m], count(rank, peer, m, n), type(m).id, peer, comm, stream),
                                    "ncclSend " + rank + "->" + peer + " #" + m);
                        }
                    }
                    for (int k = 1; k <= n; k++) {
                        int peer = (rank - k + n) % n;
                        for (int m = 0; m < 2; m++) {
                            nccl(Nccl.ncclRecv(recvBuf[peer][m], count(peer, rank, m, n), type(m).id, peer, comm, stream),
                                    "ncclRecv " + rank + "<-" + peer + " #" + m);
                        }
                    }
                    nccl(Nccl.ncclGroupEnd(), "ncclGroupEnd");
                    cuda(CudaRuntime.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
                    assertEquals(0, EmulationSupport.asyncError(comm), "async error: " + EmulationSupport.lastError(comm));
                    for (int peer = 0; peer < n; peer++) {
                        for (int m = 0; m < 2; m++) {
                            MemorySegment expected = payload(arena, peer, rank, m, n);
                            MemorySegment actual = arena.allocate(expected.byteSize(), 16);
                            EmulationSupport.toHost(actual, recvBuf[peer][m]);
                            problems.addAll(EmulationCollectives.compare("round " + round + " " + peer + "->" + rank
                                    + " #" + m, type(m), expected, actual, 0, count(peer, rank, m, n)));
                            EmulationSupport.free(sendBuf[peer][m]);
                            EmulationSupport.free(recvBuf[peer][m]);
                        }
                    }
                }
            }
            nccl(Nccl.ncclCommDestroy(comm), "ncclCommDestroy");
            world.forget(rank);
            cuda(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
            return problems;
        });
        List<String> problems = new ArrayList<>();
        results.forEach(problems::addAll);
        assertTrue(problems.isEmpty(), () -> String.join("\n", problems.subList(0, Math.min(30, problems.size()))));
    }

    @Test
    void mismatchedSendAndReceiveSizesAreAnAsyncInvalidUsage() throws Exception {
        World world = new World(2);
        MemorySegment[] comms = new MemorySegment[2];
        MemorySegment[] streams = new MemorySegment[2];
        MemorySegment[] buffers = new MemorySegment[2];
        world.run(Duration.ofSeconds(30), rank -> {
            comms[rank] = world.init(rank);
            streams[rank] = EmulationSupport.newStream();
            MemorySegment buffer = EmulationSupport.deviceMalloc(4096);
            buffers[rank] = buffer;
            if (rank == 0) {
                nccl(Nccl.ncclSend(buffer, 1000, Nccl.ncclFloat32(), 1, comms[rank], streams[rank]), "ncclSend 1000");
            } else {
                nccl(Nccl.ncclRecv(buffer, 500, Nccl.ncclFloat32(), 0, comms[rank], streams[rank]), "ncclRecv 500");
            }
            return null;
        });
        try {
            boolean reported = EmulationSupport.await(Duration.ofSeconds(10), () ->
                    EmulationSupport.asyncError(comms[0]) == Nccl.ncclInvalidUsage()
                            && EmulationSupport.asyncError(comms[1]) == Nccl.ncclInvalidUsage());
            assertTrue(reported, "async errors after a 1000-element send met a 500-element receive: rank 0 "
                    + EmulationSupport.ncclText(EmulationSupport.asyncError(comms[0])) + ", rank 1 "
                    + EmulationSupport.ncclText(EmulationSupport.asyncError(comms[1])));
            // The async error's text (ncclGetLastError of the thread that read the async error) names
            // both ranks, both counts and both types, the same on both ranks.
            for (int r = 0; r < 2; r++) {
                assertEquals(Nccl.ncclInvalidUsage(), EmulationSupport.asyncError(comms[r]));
                assertEquals("ncclSend of rank 0 to rank 1: 1000 x float32, but rank 1 receives 500 x float32 from rank 0",
                        EmulationSupport.lastError(comms[r]), "ncclGetLastError after rank " + r + "'s async error");
            }
            for (int r = 0; r < 2; r++) {
                int rank = r;
                EmulationSupport.withinTime(Duration.ofSeconds(10), "cudaStreamSynchronize", () ->
                        CudaRuntime.cudaStreamSynchronize(streams[rank]));
            }
        } finally {
            for (int r = 0; r < 2; r++) {
                int rank = r;
                EmulationSupport.withinTime(Duration.ofSeconds(10), "ncclCommAbort", () -> Nccl.ncclCommAbort(comms[rank]));
                world.forget(r);
                cuda(CudaRuntime.cudaStreamDestroy(streams[r]), "cudaStreamDestroy");
                EmulationSupport.free(buffers[r]);
            }
        }
    }
}
