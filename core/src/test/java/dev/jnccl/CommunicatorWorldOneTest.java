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

    @ParameterizedTest
    @EnumSource(ReduceOp.class)
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
}
