package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.testsupport.LowPrecision;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * One rank: a {@linkplain ReduceOp#scaledSum pre-multiplied sum} in all-reduce and reduce-scatter
 * of every type it takes (with one rank NCCL's result is each element times the factor, rounded
 * once in the type; integers wrap), memory from {@link DeviceMemory#allocateForNccl}, and
 * {@link Communicator#register} with its life rules. Runs on the host emulation;
 * {@link GpuBuffersWorldOneTest} runs it on real NCCL.
 */
class BuffersWorldOneTest {
    static final int COUNT = 4099;

    Communicator comm;
    CudaStream compute;
    Arena arena;
    Random random;

    @BeforeEach
    void open() {
        comm = Communicator.single(0);
        compute = CudaStream.create();
        arena = Arena.ofConfined();
        long seed = System.nanoTime();
        random = new Random(seed);
        System.out.println("BuffersWorldOneTest seed " + seed);
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

    /** A factor for {@code dtype}: a whole one for integers, else one with many mantissa bits. */
    private static double factorFor(DType dtype) {
        return switch (dtype) {
            case INT8, INT32, INT64 -> -3;
            case UINT8, UINT32, UINT64 -> 7;
            default -> 0.3;
        };
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, mode = EnumSource.Mode.EXCLUDE, names = {"BYTE", "FP8_E4M3", "FP8_E5M2"})
    void scaledSumMultipliesEachElementInItsType(DType dtype) {
        if (!JncclRuntime.query().supports(dtype)) {
            return;
        }
        ReduceOp op = ReduceOp.scaledSum(factorFor(dtype));
        // Lengths where NCCL before 2.30 leaves a tail unscaled on one rank (jnccl splits it off), and one where it does not.
        for (int count : new int[] {COUNT, 4097, 65537, 4096}) {
            scaledSumOfLength(dtype, op, count);
        }
    }

    /** In-place all-reduce and reduce-scatter, and an out-of-place reduce into memory filled with other random data. */
    private void scaledSumOfLength(DType dtype, ReduceOp op, int count) {
        for (String command : new String[] {"allReduce", "reduceScatter", "reduce"}) {
            MemorySegment input = TestData.random(arena, dtype, count, random);
            try (DeviceMemory memory = DeviceMemory.allocate(input.byteSize());
                 DeviceMemory out = DeviceMemory.allocate(input.byteSize());
                 CudaEvent ready = CudaEvent.create(); CudaEvent done = CudaEvent.create()) {
                memory.copyFromHost(input);
                out.copyFromHost(TestData.random(arena, dtype, count, random));
                compute.record(ready);
                DeviceMemory result = command.equals("reduce") ? out : memory;
                try (Transaction tx = comm.begin(ready)) {
                    switch (command) {
                        case "allReduce" -> tx.allReduce(memory.tensor(dtype), op);
                        case "reduceScatter" -> tx.reduceScatter(memory.tensor(dtype), op);
                        default -> tx.reduce(memory.tensor(dtype), out.tensor(dtype), op, 0);
                    }
                    tx.execute(done);
                }
                comm.await(done);
                MemorySegment output = arena.allocate(input.byteSize());
                result.copyToHost(output);
                for (int i = 0; i < count; i++) {
                    long in = element(input, dtype, i);
                    long want = scaled(dtype, in, op.factor());
                    long have = element(output, dtype, i);
                    int index = i;
                    assertEquals(want, have, () -> command + " " + op + " of " + dtype + ", element " + index + " of "
                            + count + ": input 0x" + Long.toHexString(in) + ", got 0x" + Long.toHexString(have)
                            + ", want 0x" + Long.toHexString(want));
                }
            }
        }
    }

    /** NCCL's single-rank pre-multiplied sum of one element: x times the factor in the type, rounded once. */
    static long scaled(DType dtype, long bits, double factor) {
        float f = (float) factor;
        return switch (dtype) {
            case FP64 -> Double.doubleToRawLongBits(Double.longBitsToDouble(bits) * factor);
            case FP32 -> Float.floatToRawIntBits(Float.intBitsToFloat((int) bits) * f) & 0xFFFF_FFFFL;
            case FP16 -> LowPrecision.floatToHalf(LowPrecision.halfToFloat((short) bits)
                    * LowPrecision.halfToFloat(LowPrecision.floatToHalf(f))) & 0xFFFFL;
            case BF16 -> LowPrecision.floatToBf16(LowPrecision.bf16ToFloat((short) bits)
                    * LowPrecision.bf16ToFloat(LowPrecision.floatToBf16(f))) & 0xFFFFL;
            case INT8, UINT8 -> (bits * (long) factor) & 0xFFL;
            case INT32, UINT32 -> (bits * (long) factor) & 0xFFFF_FFFFL;
            case INT64, UINT64 -> bits * (long) factor;
            default -> throw new IllegalArgumentException(dtype.toString());
        };
    }

    static long element(MemorySegment data, DType dtype, int index) {
        long offset = (long) index * dtype.size();
        return switch (dtype.size()) {
            case 1 -> data.get(ValueLayout.JAVA_BYTE, offset) & 0xFFL;
            case 2 -> data.get(ValueLayout.JAVA_SHORT_UNALIGNED, offset) & 0xFFFFL;
            case 4 -> data.get(ValueLayout.JAVA_INT_UNALIGNED, offset) & 0xFFFF_FFFFL;
            default -> data.get(ValueLayout.JAVA_LONG_UNALIGNED, offset);
        };
    }

    @Test
    void scaledSumFactorsAreCheckedAgainstTheType() {
        DeviceMemory memory = DeviceMemory.allocate(64);
        try (memory; Transaction tx = comm.begin(compute)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> tx.allReduce(memory.tensor(DType.INT32), ReduceOp.scaledSum(0.5)));
            assertEquals("allReduce: scaledSum factor 0.5 cannot scale INT32 tensors: INT32 tensors take a whole factor"
                    + " in [-2147483648, 2147483647]", e.getMessage());
            e = assertThrows(IllegalArgumentException.class,
                    () -> tx.reduceScatter(memory.tensor(DType.UINT8), ReduceOp.scaledSum(256)));
            assertEquals("reduceScatter: scaledSum factor 256.0 cannot scale UINT8 tensors: UINT8 tensors take a whole"
                    + " factor in [0, 255]", e.getMessage());
            e = assertThrows(IllegalArgumentException.class,
                    () -> tx.allReduce(memory.tensor(DType.FP16), ReduceOp.scaledSum(-70000)));
            assertEquals("allReduce: scaledSum factor -70000.0 cannot scale FP16 tensors: its magnitude exceeds the"
                    + " largest finite FP16, 65504.0", e.getMessage());
            e = assertThrows(IllegalArgumentException.class,
                    () -> tx.allReduce(memory.tensor(DType.FP8_E4M3), ReduceOp.scaledSum(0.5)));
            assertTrue(e.getMessage().contains("needs at least 2 ranks"), e.getMessage());
            e = assertThrows(IllegalArgumentException.class,
                    () -> tx.allReduce(memory.tensor(DType.BYTE), ReduceOp.scaledSum(2)));
            assertTrue(e.getMessage().startsWith("allReduce: BYTE tensors cannot be reduced (SCALED_SUM(2.0))"),
                    e.getMessage());
            tx.allReduce(memory.tensor(DType.UINT64), ReduceOp.scaledSum(0x1p63)); // in range, accepted
        }
    }

    @Test
    void preMulSumOperatorsAreMadeOncePerTypeAndScalar() {
        NcclComm nccl = comm.ncclComm();
        nccl.lock().lock();
        try {
            int half = nccl.preMulSum(DType.FP32, 0.5);
            assertTrue(half >= 5, "a user operator lies past NCCL's built-ins: " + half);
            assertEquals(half, nccl.preMulSum(DType.FP32, 0.5));
            assertNotEquals(half, nccl.preMulSum(DType.FP16, 0.5));
            assertNotEquals(half, nccl.preMulSum(DType.FP32, 0.25));
            // Two factors that are one FP16 value share its operator: NCCL only sees the scalar.
            assertEquals(nccl.preMulSum(DType.FP16, 0.1), nccl.preMulSum(DType.FP16, 0.10000001));
        } finally {
            nccl.lock().unlock();
        }
    }

    @Test
    void ncclAllocatedMemoryCarriesCollectives() {
        assertEquals("allocateForNccl: bytes 0 must be positive",
                assertThrows(IllegalArgumentException.class, () -> DeviceMemory.allocateForNccl(0)).getMessage());
        assertThrows(IllegalArgumentException.class, () -> DeviceMemory.allocateForNccl(-8));
        MemorySegment input = TestData.random(arena, DType.FP32, COUNT, random);
        DeviceMemory memory = DeviceMemory.allocateForNccl(input.byteSize());
        try (memory) {
            assertTrue(memory.isOwned());
            assertEquals(input.byteSize(), memory.bytes());
            memory.copyFromHost(input);
            comm.allReduce(memory.tensor(DType.FP32), ReduceOp.scaledSum(0.3), compute);
            compute.synchronize();
            MemorySegment output = arena.allocate(input.byteSize());
            memory.copyToHost(output);
            for (int i = 0; i < COUNT; i++) {
                assertEquals(scaled(DType.FP32, element(input, DType.FP32, i), 0.3), element(output, DType.FP32, i),
                        "element " + i);
            }
        }
        assertTrue(memory.isClosed());
    }

    @Test
    void registeredMemoryCarriesCollectivesAndCannotBeFreedWhileRegistered() {
        MemorySegment input = TestData.random(arena, DType.INT32, COUNT, random);
        DeviceMemory memory = DeviceMemory.allocateForNccl(input.byteSize());
        Registration registration = comm.register(memory);
        assertFalse(registration.isClosed());
        assertEquals(memory, registration.memory());
        IllegalStateException refused = assertThrows(IllegalStateException.class, memory::close);
        assertTrue(refused.getMessage().contains("is still registered with the communicator of rank 0 of 1"),
                refused.getMessage());
        assertFalse(memory.isClosed());
        memory.copyFromHost(input);
        comm.allReduce(memory.tensor(DType.INT32), ReduceOp.scaledSum(-3), compute);
        compute.synchronize();
        MemorySegment output = arena.allocate(input.byteSize());
        memory.copyToHost(output);
        for (int i = 0; i < COUNT; i++) {
            assertEquals(scaled(DType.INT32, element(input, DType.INT32, i), -3), element(output, DType.INT32, i),
                    "element " + i);
        }
        // Registered twice (NCCL counts both under one handle): each registration is closed on its own.
        Registration again = comm.register(memory);
        registration.close();
        registration.close(); // harmless
        assertTrue(registration.isClosed());
        assertThrows(IllegalStateException.class, memory::close, "still registered once");
        again.close();
        memory.close();
        assertTrue(memory.isClosed());
        assertEquals("register: " + memory + " is closed",
                assertThrows(IllegalStateException.class, () -> comm.register(memory)).getMessage());
    }

    @Test
    void closingTheCommunicatorDeregisters() {
        DeviceMemory memory = DeviceMemory.allocate(4096);
        Registration registration = comm.register(memory);
        comm.close();
        assertTrue(registration.isClosed());
        registration.close(); // after the communicator: nothing to do
        memory.close();
        try (DeviceMemory other = DeviceMemory.allocate(8)) {
            assertEquals("register: communicator of rank 0 is closed",
                    assertThrows(IllegalStateException.class, () -> comm.register(other)).getMessage());
        }
    }

    @Test
    void registrationArgumentsAreChecked() {
        assertThrows(NullPointerException.class, () -> comm.register(null));
        try (DeviceMemory empty = DeviceMemory.allocate(0)) {
            assertTrue(assertThrows(IllegalArgumentException.class, () -> comm.register(empty)).getMessage()
                    .endsWith("is empty: expected at least 1 byte"));
        }
        if (Cuda.deviceCount() > 1) {
            int before = Cuda.currentDevice();
            Cuda.setDevice(1);
            try (DeviceMemory other = DeviceMemory.allocate(64)) {
                Cuda.setDevice(before);
                assertTrue(assertThrows(IllegalArgumentException.class, () -> comm.register(other)).getMessage()
                        .contains("is on device 1, the communicator of rank 0 on device 0"));
            } finally {
                Cuda.setDevice(before);
            }
        }
    }

    @Test
    void abortDropsRegistrationsNatively() {
        DeviceMemory memory = DeviceMemory.allocate(256);
        Registration registration = comm.register(memory);
        comm.abort("test");
        registration.close(); // no ncclCommDeregister on an aborted communicator
        memory.close();
        assertTrue(memory.isClosed());
    }
}
