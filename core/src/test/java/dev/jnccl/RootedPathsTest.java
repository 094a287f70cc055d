package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Both NCCL paths of {@link Transaction#gather} and {@link Transaction#scatter} ({@code ncclGather}
 * / {@code ncclScatter}, which the emulation has as NCCL 2.28+, and the grouped send/recv of an
 * older NCCL), and the uneven all-to-all (always send/recv), at worlds 1 to 4, out of place with
 * null buffers on the non-roots and in place on the root, between a ring send and its receive
 * (their messages must never pair), against a Java reference of random bytes.
 */
class RootedPathsTest {
    private static final int SLOT = 131;

    static Stream<Arguments> cases() {
        List<Arguments> cases = new ArrayList<>();
        for (int world = 1; world <= 4; world++) {
            for (boolean bySendRecv : new boolean[] {false, true}) {
                for (boolean inPlace : new boolean[] {false, true}) {
                    cases.add(Arguments.of(world, bySendRecv, inPlace));
                }
            }
        }
        return cases.stream();
    }

    private static byte[] input(long seed, int rank, String tag, int bytes) {
        byte[] data = new byte[bytes];
        new Random(seed * 31 + rank * 7919L + tag.hashCode()).nextBytes(data);
        return data;
    }

    /** Uneven counts: rank {@code from} sends {@code (from * 3 + to * 5 + seed) % 7} elements to rank {@code to}. */
    private static long count(long seed, int from, int to) {
        return Math.floorMod(from * 3 + to * 5 + seed, 7);
    }

    @ParameterizedTest(name = "world {0}, send/recv {1}, in place {2}")
    @MethodSource("cases")
    void gatherScatterAndUnevenAllToAllMatchTheReference(int world, boolean bySendRecv, boolean inPlace) throws Throwable {
        long seed = System.nanoTime();
        DType dtype = DType.INT32;
        int es = dtype.size();
        int slotBytes = SLOT * es;
        List<Object> results = LocalRanks.run(world, CommunicatorOptions.defaults(), bySendRecv, comm -> {
            int rank = comm.rank();
            int root = world - 1;
            boolean isRoot = rank == root;
            try (Arena arena = Arena.ofConfined(); CudaStream stream = CudaStream.create();
                 DeviceMemory gathered = DeviceMemory.allocate((long) slotBytes * world);
                 DeviceMemory mine = DeviceMemory.allocate(slotBytes);
                 DeviceMemory scattered = DeviceMemory.allocate((long) slotBytes * world);
                 DeviceMemory slot = DeviceMemory.allocate(slotBytes);
                 DeviceMemory a2aSend = DeviceMemory.allocate(7L * world * es);
                 DeviceMemory a2aRecv = DeviceMemory.allocate(7L * world * es);
                 DeviceMemory ring = DeviceMemory.allocate(DType.INT32, 8);
                 DeviceMemory ringIn = DeviceMemory.allocate(DType.INT32, 8)) {
                DeviceTensor whole = gathered.tensor(dtype);
                DeviceTensor scatterWhole = scattered.tensor(dtype);
                // gather's source: in place on the root it is the root's slot of the gathered tensor
                DeviceTensor gatherSrc = inPlace && isRoot ? whole.shard(root, world) : mine.tensor(dtype);
                DeviceTensor scatterDst = inPlace && isRoot ? scatterWhole.shard(root, world) : slot.tensor(dtype);
                gathered.fill((byte) 0x5a, stream);
                slot.fill((byte) 0x66, stream);
                a2aRecv.fill((byte) 0x77, stream);
                stream.synchronize();
                copy(gatherSrc, input(seed, rank, "gather", slotBytes));
                if (isRoot) {
                    scattered.copyFromHost(MemorySegment.ofArray(input(seed, rank, "scatter", slotBytes * world)));
                }
                a2aSend.copyFromHost(MemorySegment.ofArray(input(seed, rank, "a2a", 7 * world * es)));
                ring.copyFromHost(MemorySegment.ofArray(new int[] {rank, 1, 2, 3, 4, 5, 6, 7}));
                long[] sendCounts = new long[world];
                long[] recvCounts = new long[world];
                for (int q = 0; q < world; q++) {
                    sendCounts[q] = count(seed, rank, q);
                    recvCounts[q] = count(seed, q, rank);
                }
                try (Transaction tx = comm.begin(stream)) {
                    tx.send(ring.tensor(DType.INT32), (rank + 1) % world)
                            .gather(gatherSrc, isRoot ? whole : null, root)
                            .scatter(isRoot ? scatterWhole : null, scatterDst, root)
                            .allToAll(a2aSend.tensor(dtype), sendCounts, a2aRecv.tensor(dtype), recvCounts)
                            .recv(ringIn.tensor(DType.INT32), (rank + world - 1) % world);
                    tx.execute(null);
                }
                comm.synchronize();
                String what = "rank " + rank + " of " + world;
                if (isRoot) {
                    byte[] expected = new byte[slotBytes * world];
                    for (int from = 0; from < world; from++) {
                        System.arraycopy(input(seed, from, "gather", slotBytes), 0, expected, from * slotBytes, slotBytes);
                    }
                    assertArrayEquals(expected, read(arena, whole), "gather at the root, " + what);
                }
                byte[] expectedSlot = Arrays.copyOfRange(input(seed, root, "scatter", slotBytes * world),
                        rank * slotBytes, (rank + 1) * slotBytes);
                assertArrayEquals(expectedSlot, read(arena, scatterDst), "scatter, " + what);
                byte[] expectedA2a = new byte[7 * world * es];
                Arrays.fill(expectedA2a, (byte) 0x77);
                long at = 0;
                for (int from = 0; from < world; from++) {
                    long offset = 0;
                    for (int q = 0; q < rank; q++) {
                        offset += count(seed, from, q);
                    }
                    System.arraycopy(input(seed, from, "a2a", 7 * world * es), (int) offset * es, expectedA2a,
                            (int) at * es, (int) recvCounts[from] * es);
                    at += recvCounts[from];
                }
                assertArrayEquals(expectedA2a, read(arena, a2aRecv.tensor(dtype)), "uneven allToAll, " + what);
                MemorySegment ringGot = arena.allocate(32);
                ringIn.copyToHost(ringGot);
                assertArrayEquals(new int[] {(rank + world - 1) % world, 1, 2, 3, 4, 5, 6, 7},
                        ringGot.toArray(ValueLayout.JAVA_INT), "ring message, " + what);
                comm.barrier(); // nobody frees a buffer before every peer has read it
            }
            return "ok";
        });
        LocalRanks.rethrowAny(results);
    }

    private static void copy(DeviceTensor to, byte[] bytes) {
        try (CudaStream stream = CudaStream.create();
             DeviceMemory staging = DeviceMemory.allocate(bytes.length)) {
            staging.copyFromHost(MemorySegment.ofArray(bytes));
            stream.copyAsync(staging.tensor(to.dtype()), to);
            stream.synchronize();
        }
    }

    private static byte[] read(Arena arena, DeviceTensor tensor) {
        try (CudaStream stream = CudaStream.create();
             DeviceMemory staging = DeviceMemory.allocate(tensor.bytes())) {
            stream.copyAsync(tensor, staging.tensor(tensor.dtype()));
            stream.synchronize();
            MemorySegment host = arena.allocate(tensor.bytes());
            staging.copyToHost(host);
            return host.toArray(ValueLayout.JAVA_BYTE);
        }
    }
}
