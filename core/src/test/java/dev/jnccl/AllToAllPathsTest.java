package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.stream.Stream;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Both NCCL paths of {@link Transaction#allToAll}: {@code ncclAlltoAll} (the emulation has it, as
 * NCCL 2.28+) and the grouped send/recv that NCCL before 2.28 gets, at worlds 1 to 4, added between
 * a ring send and its receive (its messages must never pair with theirs), against a Java reference
 * (slot {@code i} of rank {@code r}'s output is slot {@code r} of rank {@code i}'s input).
 */
class AllToAllPathsTest {
    private static final int SLOT = 257;

    static Stream<Arguments> cases() {
        List<Arguments> cases = new ArrayList<>();
        for (int world = 1; world <= 4; world++) {
            for (boolean bySendRecv : new boolean[] {false, true}) {
                for (DType dtype : new DType[] {DType.INT32, DType.FP16, DType.INT64}) {
                    cases.add(Arguments.of(world, bySendRecv, dtype));
                }
            }
        }
        return cases.stream();
    }

    private static byte[] input(long seed, int rank, DType dtype, int world) {
        byte[] bytes = new byte[SLOT * world * dtype.size()];
        new Random(seed * 31 + rank).nextBytes(bytes);
        return bytes;
    }

    @ParameterizedTest(name = "world {0}, send/recv {1}, {2}")
    @MethodSource("cases")
    void allToAllMatchesTheReference(int world, boolean bySendRecv, DType dtype) throws Throwable {
        long seed = System.nanoTime();
        List<Object> results = LocalRanks.run(world, CommunicatorOptions.defaults(), bySendRecv, comm -> {
            int rank = comm.rank();
            int slotBytes = SLOT * dtype.size();
            byte[] mine = input(seed, rank, dtype, world);
            try (Arena arena = Arena.ofConfined(); CudaStream stream = CudaStream.create();
                 DeviceMemory send = DeviceMemory.allocate(mine.length);
                 DeviceMemory recv = DeviceMemory.allocate(mine.length);
                 DeviceMemory ring = DeviceMemory.allocate(DType.INT32, 8);
                 DeviceMemory ringIn = DeviceMemory.allocate(DType.INT32, 8)) {
                send.copyFromHost(MemorySegment.ofArray(mine));
                recv.fill((byte) 0x77, stream);
                ring.copyFromHost(MemorySegment.ofArray(new int[] {rank, 1, 2, 3, 4, 5, 6, 7}));
                stream.synchronize();
                try (Transaction tx = comm.begin(stream)) {
                    tx.send(ring.tensor(DType.INT32), (rank + 1) % world)
                            .allToAll(send.tensor(dtype), recv.tensor(dtype))
                            .recv(ringIn.tensor(DType.INT32), (rank + world - 1) % world);
                    tx.execute(null);
                }
                comm.synchronize();
                byte[] expected = new byte[mine.length];
                for (int from = 0; from < world; from++) {
                    System.arraycopy(input(seed, from, dtype, world), rank * slotBytes, expected, from * slotBytes,
                            slotBytes);
                }
                MemorySegment got = arena.allocate(mine.length);
                recv.copyToHost(got);
                assertArrayEquals(expected, got.toArray(ValueLayout.JAVA_BYTE), "rank " + rank + " of " + world);
                MemorySegment ringGot = arena.allocate(32);
                ringIn.copyToHost(ringGot);
                assertArrayEquals(new int[] {(rank + world - 1) % world, 1, 2, 3, 4, 5, 6, 7},
                        ringGot.toArray(ValueLayout.JAVA_INT), "ring message to rank " + rank);
                comm.barrier(); // nobody frees its send buffer before every peer has read it
            }
            return "ok";
        });
        LocalRanks.rethrowAny(results);
    }
}
