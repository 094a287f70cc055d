package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Every operation on a world-1 communicator, with random data checked element by element. Runs on
 * whatever backend {@code jnccl.backend} resolves to: the host emulation on CI, real NCCL on a GPU
 * (see {@link GpuCommunicatorWorldOneTest}). With one rank every reduction is the identity, so the
 * expected result is the input, bit for bit.
 */
class CommunicatorWorldOneTest {
    static final int COUNT = 4099 * 4;

    Communicator comm;
    CudaStream compute;
    Arena arena;
    Random random;

    @BeforeEach
    void open() {
        comm = Communicator.single(0);
        compute = CudaStream.create();
        arena = Arena.ofConfined();
        random = new Random(System.nanoTime());
    }

    @AfterEach
    void close() {
        if (compute != null) {
            compute.close();
        }
        if (comm != null) {
            comm.close();
        }
        if (arena != null) {
            arena.close();
        }
    }

    private DeviceMemory upload(MemorySegment host) {
        DeviceMemory memory = DeviceMemory.allocate(host.byteSize());
        memory.copyFromHost(host);
        return memory;
    }

    private byte[] download(DeviceMemory memory, long bytes) {
        MemorySegment host = arena.allocate(bytes);
        memory.copyToHost(host);
        return host.toArray(ValueLayout.JAVA_BYTE);
    }

    private boolean supported(DType dtype) {
        return JncclRuntime.query().supports(dtype);
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, mode = EnumSource.Mode.EXCLUDE, names = "BYTE")
    void transactionReduceScatterOfEveryType(DType dtype) {
        if (!supported(dtype)) {
            return;
        }
        for (ReduceOp op : ReduceOp.values()) {
            MemorySegment input = TestData.random(arena, dtype, COUNT, random);
            try (DeviceMemory memory = upload(input); CudaEvent ready = CudaEvent.create();
                 CudaEvent signal = CudaEvent.create()) {
                compute.record(ready);
                try (Transaction tx = comm.begin(ready)) {
                    tx.reduceScatter(memory.tensor(dtype).slice(0, COUNT), op);
                    tx.execute(signal);
                }
                comm.await(signal);
                assertArrayEquals(input.toArray(ValueLayout.JAVA_BYTE), download(memory, input.byteSize()),
                        dtype + " " + op);
            }
        }
    }

    @ParameterizedTest
    @EnumSource(DType.class)
    void allGatherInPlaceAndOutOfPlace(DType dtype) {
        if (!supported(dtype)) {
            return;
        }
        MemorySegment input = TestData.random(arena, dtype, COUNT, random);
        try (DeviceMemory shard = upload(input); DeviceMemory full = DeviceMemory.allocate(dtype, COUNT);
             CudaEvent signal = CudaEvent.create()) {
            full.fill((byte) 0x5a, compute);
            try (Transaction tx = comm.begin(compute)) {
                tx.allGather(shard.tensor(dtype), full.tensor(dtype));
                DeviceTensor inPlace = shard.tensor(dtype);
                tx.allGather(inPlace.shard(0, 1), inPlace);
                tx.execute(signal);
            }
            comm.await(signal);
            byte[] expected = input.toArray(ValueLayout.JAVA_BYTE);
            assertArrayEquals(expected, download(full, input.byteSize()), "out of place " + dtype);
            assertArrayEquals(expected, download(shard, input.byteSize()), "in place " + dtype);
        }
    }

    @Test
    void destructiveAllToAllOfOneRankKeepsTheOwnShard() {
        MemorySegment input = TestData.random(arena, DType.INT32, COUNT, random);
        try (DeviceMemory memory = upload(input); CudaEvent signal = CudaEvent.create()) {
            try (Transaction tx = comm.begin(compute)) {
                tx.destructiveAllToAll(memory.tensor(DType.INT32));
                tx.execute(signal);
            }
            comm.await(signal);
            assertArrayEquals(input.toArray(ValueLayout.JAVA_BYTE), download(memory, input.byteSize()));
        }
    }

    static List<ReduceOp> builtInOps() {
        return List.of(ReduceOp.values());
    }

    @ParameterizedTest
    @MethodSource("builtInOps")
    void allReduceAndItsShortcuts(ReduceOp op) {
        MemorySegment input = TestData.random(arena, DType.FP32, COUNT, random);
        try (DeviceMemory memory = upload(input)) {
            comm.allReduce(memory.tensor(DType.FP32), op, compute);
            comm.reduceMean(memory.tensor(DType.FP32), compute);
            comm.reduceMax(memory.tensor(DType.FP32), compute);
            comm.reduceScatter(List.of(memory.tensor(DType.FP32).slice(0, 8), memory.tensor(DType.FP32).slice(8, 8)),
                    compute);
            comm.reduceNormSquared(memory.tensor(DType.FP32).slice(16, 1), compute);
            compute.synchronize();
            assertArrayEquals(input.toArray(ValueLayout.JAVA_BYTE), download(memory, input.byteSize()));
        }
    }

    @Test
    void emptyTransactionStillRecordsTheSignal() {
        try (CudaEvent signal = CudaEvent.create()) {
            try (Transaction tx = comm.begin(compute)) {
                tx.execute(signal);
            }
            comm.await(signal);
            assertTrue(signal.isComplete());
        }
    }

    @Test
    void hostHelpersOfOneRank() {
        comm.barrier();
        byte[] mine = {1, 2, 3};
        assertArrayEquals(mine, comm.allGatherBytesHost(mine).getFirst());
        assertArrayEquals(mine, comm.gatherBytesHost(mine, 0).getFirst());
        assertArrayEquals(new long[] {42L}, comm.allGatherLongsHost(42L));
        assertEquals(0, comm.rank());
        assertEquals(1, comm.worldSize());
        assertEquals(0, comm.device());
        assertFalse(comm.ncclVersion().isBlank());
    }

    @Test
    void closeIsIdempotentAndLaterUseSaysClosed() {
        comm.close();
        comm.close();
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> comm.begin(compute));
        assertEquals("begin: communicator of rank 0 is closed", e.getMessage());
    }
    // ---------------------------------------------------------------- broadcast, allToAll, self send/recv, split

    @ParameterizedTest
    @EnumSource(DType.class)
    void broadcastOfEveryTypeKeepsTheRootsData(DType dtype) {
        if (!supported(dtype)) {
            return;
        }
        MemorySegment first = TestData.random(arena, dtype, COUNT, random);
        MemorySegment second = TestData.random(arena, dtype, COUNT, random);
        try (DeviceMemory a = upload(first); DeviceMemory b = upload(second); CudaEvent signal = CudaEvent.create()) {
            try (Transaction tx = comm.begin(compute)) {
                tx.broadcast(a.tensor(dtype), 0);
                assertEquals(1, tx.size(), "the broadcast is the one command");
                tx.execute(signal);
            }
            comm.await(signal);
            comm.broadcast(b.tensor(dtype), 0, compute);
            compute.synchronize();
            assertArrayEquals(first.toArray(ValueLayout.JAVA_BYTE), download(a, first.byteSize()), "transaction " + dtype);
            assertArrayEquals(second.toArray(ValueLayout.JAVA_BYTE), download(b, second.byteSize()), "convenience " + dtype);
        }
    }

    @ParameterizedTest
    @EnumSource(DType.class)
    void allToAllOfEveryTypeCopiesTheOwnSlot(DType dtype) {
        if (!supported(dtype)) {
            return;
        }
        MemorySegment input = TestData.random(arena, dtype, COUNT, random);
        byte[] expected = input.toArray(ValueLayout.JAVA_BYTE);
        try (DeviceMemory send = upload(input); DeviceMemory recv = DeviceMemory.allocate(dtype, COUNT);
             DeviceMemory recv2 = DeviceMemory.allocate(dtype, COUNT); CudaEvent signal = CudaEvent.create()) {
            recv.fill((byte) 0x5a, compute);
            recv2.fill((byte) 0x3c, compute);
            try (Transaction tx = comm.begin(compute)) {
                tx.allToAll(send.tensor(dtype), recv.tensor(dtype));
                tx.execute(signal);
            }
            comm.await(signal);
            comm.allToAll(send.tensor(dtype), recv2.tensor(dtype), compute);
            compute.synchronize();
            assertArrayEquals(expected, download(recv, input.byteSize()), "transaction " + dtype);
            assertArrayEquals(expected, download(recv2, input.byteSize()), "convenience " + dtype);
            assertArrayEquals(expected, download(send, input.byteSize()), "send buffer unchanged " + dtype);
        }
    }

    @Test
    void sendAndReceiveToItselfInOrder() {
        MemorySegment first = TestData.random(arena, DType.FP32, COUNT, random);
        MemorySegment second = TestData.random(arena, DType.INT64, 100, random);
        try (DeviceMemory a = upload(first); DeviceMemory b = upload(second);
             DeviceMemory inA = DeviceMemory.allocate(DType.FP32, COUNT); DeviceMemory inB = DeviceMemory.allocate(DType.INT64, 100);
             CudaEvent signal = CudaEvent.create()) {
            try (Transaction tx = comm.begin(compute)) {
                // The ring of any world size: send to (rank + 1) % n, receive from (rank - 1 + n) % n.
                int next = (comm.rank() + 1) % comm.worldSize();
                int prev = (comm.rank() + comm.worldSize() - 1) % comm.worldSize();
                tx.send(a.tensor(DType.FP32), next).recv(inA.tensor(DType.FP32), prev);
                tx.send(b.tensor(DType.INT64), next).recv(inB.tensor(DType.INT64), prev);
                tx.execute(signal);
            }
            comm.await(signal);
            assertArrayEquals(first.toArray(ValueLayout.JAVA_BYTE), download(inA, first.byteSize()), "first message");
            assertArrayEquals(second.toArray(ValueLayout.JAVA_BYTE), download(inB, second.byteSize()), "second message");
        }
    }

    @Test
    void newOperationsCheckTheirArguments() {
        try (DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 64); Transaction tx = comm.begin(compute)) {
            DeviceTensor t = memory.tensor(DType.FP32);
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> tx.broadcast(t, 1));
            assertEquals("broadcast: root 1 out of range [0, 1)", e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> tx.broadcast(t, -1));
            assertEquals("broadcast: root -1 out of range [0, 1)", e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> tx.allToAll(t.slice(0, 32), t.slice(16, 32)));
            assertTrue(e.getMessage().startsWith("allToAll: send ") && e.getMessage().contains("overlap"), e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> tx.allToAll(t.slice(0, 16), t.slice(32, 8)));
            assertEquals("allToAll: send has 16 elements but recv has 8", e.getMessage());
            DeviceTensor ints = new DeviceTensor(t.address() + 128, DType.INT32, 16);
            e = assertThrows(IllegalArgumentException.class, () -> tx.allToAll(t.slice(0, 16), ints));
            assertEquals("allToAll: send dtype FP32 differs from recv dtype INT32", e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> tx.send(t, 1));
            assertEquals("send: peer 1 out of range [0, 1)", e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> comm.broadcast(t, 2, compute));
            assertEquals("broadcast: root 2 out of range [0, 1)", e.getMessage());
            assertEquals(0, tx.size(), "nothing was added");
        }
    }

    @Test
    void splitGivesAWorkingChildOrNothing() {
        MemorySegment input = TestData.random(arena, DType.FP32, COUNT, random);
        try (DeviceMemory memory = upload(input)) {
            Communicator child = comm.split(7, 3).orElseThrow();
            try (child) {
                assertEquals(0, child.rank());
                assertEquals(1, child.worldSize());
                assertEquals(comm.device(), child.device());
                assertEquals(comm, child.parent().orElseThrow());
                assertTrue(comm.parent().isEmpty());
                child.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM, compute);
                child.broadcast(memory.tensor(DType.FP32), 0, compute);
                compute.synchronize();
                assertArrayEquals(input.toArray(ValueLayout.JAVA_BYTE), download(memory, input.byteSize()));
                child.barrier();
                assertArrayEquals(new long[] {5L}, child.allGatherLongsHost(5L));
            }
            assertTrue(child.isClosed());
            assertTrue(comm.split(-1, 0).isEmpty(), "a negative color is no member");
            // The parent still works after its child is gone.
            comm.allReduce(memory.tensor(DType.FP32), ReduceOp.MAX, compute);
            compute.synchronize();
            assertArrayEquals(input.toArray(ValueLayout.JAVA_BYTE), download(memory, input.byteSize()));
        }
    }

    @Test
    void closingTheParentClosesLiveChildren() {
        Communicator child = comm.split(0, 0).orElseThrow();
        Communicator grandChild = child.split(0, 0).orElseThrow();
        comm.close();
        assertTrue(grandChild.isClosed(), "grandchild closed with the parent");
        assertTrue(child.isClosed(), "child closed with the parent");
        assertTrue(comm.isClosed());
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> child.barrier());
        assertEquals("barrier: communicator of rank 0 is closed", e.getMessage());
    }

    @Test
    void splitAndConvenienceOperationsNeedNoOpenTransaction() {
        try (DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 64); Transaction ignored = comm.begin(compute)) {
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> comm.split(0, 0));
            assertTrue(e.getMessage().startsWith("split: transaction #1 of rank 0 is still open"), e.getMessage());
            e = assertThrows(IllegalStateException.class,
                    () -> comm.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM, compute));
            assertTrue(e.getMessage().startsWith("allReduce: transaction #1 of rank 0 is still open"), e.getMessage());
        }
    }
}
