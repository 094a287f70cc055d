package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * {@link CudaStream#copyAsync}: random data copied on one device and between two (emulated or
 * real) devices, byte for byte; partial copies leave the rest alone; the argument checks name the
 * values before anything reaches CUDA.
 */
class CopyAsyncTest {
    private static final long COUNT = 3 * 4099;

    private Arena arena;
    private Random random;
    private CudaStream stream;

    @BeforeEach
    void open() {
        arena = Arena.ofConfined();
        long seed = System.nanoTime();
        random = new Random(seed);
        System.out.println("CopyAsyncTest seed " + seed);
        Cuda.setDevice(0);
        stream = CudaStream.create();
    }

    @AfterEach
    void close() {
        if (stream != null) {
            stream.close();
        }
        Cuda.setDevice(0);
        arena.close();
    }

    private DeviceMemory upload(int device, MemorySegment host) {
        Cuda.setDevice(device);
        try {
            DeviceMemory memory = DeviceMemory.allocate(host.byteSize());
            memory.copyFromHost(host);
            return memory;
        } finally {
            Cuda.setDevice(0);
        }
    }

    private MemorySegment download(DeviceMemory memory) {
        MemorySegment host = arena.allocate(memory.bytes());
        memory.copyToHost(host);
        return host;
    }

    private static void assertSameBytes(MemorySegment expected, MemorySegment actual, String what) {
        assertEquals(expected.byteSize(), actual.byteSize(), what + ": size");
        for (long i = 0; i < expected.byteSize(); i++) {
            byte e = expected.get(ValueLayout.JAVA_BYTE, i);
            byte a = actual.get(ValueLayout.JAVA_BYTE, i);
            if (e != a) {
                throw new AssertionError(what + ": byte " + i + " is " + a + ", expected " + e);
            }
        }
    }

    @Test
    void copiesRandomDataOnOneDevice() {
        MemorySegment data = TestData.random(arena, DType.FP32, COUNT, random);
        MemorySegment other = TestData.random(arena, DType.FP32, COUNT, random);
        try (DeviceMemory from = upload(0, data); DeviceMemory to = upload(0, other)) {
            stream.copyAsync(from.tensor(DType.FP32), to.tensor(DType.FP32));
            stream.synchronize();
            assertSameBytes(data, download(to), "device 0 -> device 0");
            assertSameBytes(data, download(from), "the source afterwards");
        }
    }

    @Test
    void copiesBetweenDevicesInBothDirectionsAndOnlyTheSlice() {
        assumeTrue(Cuda.deviceCount() >= 2, "needs two devices; " + Cuda.deviceCount() + " visible");
        MemorySegment a = TestData.random(arena, DType.BF16, COUNT, random);
        MemorySegment b = TestData.random(arena, DType.BF16, COUNT, random);
        try (DeviceMemory onZero = upload(0, a); DeviceMemory onOne = upload(1, b)) {
            // The middle third of device 0's tensor into the last third of device 1's.
            long third = COUNT / 3;
            DeviceTensor source = onZero.tensor(DType.BF16).slice(third, third);
            DeviceTensor target = onOne.tensor(DType.BF16).slice(2 * third, third);
            stream.copyAsync(source, target);
            stream.synchronize();
            MemorySegment expected = arena.allocate(b.byteSize());
            expected.copyFrom(b);
            long bytesPerThird = third * DType.BF16.size();
            MemorySegment.copy(a, bytesPerThird, expected, 2 * bytesPerThird, bytesPerThird);
            assertSameBytes(expected, download(onOne), "device 0 middle third -> device 1 last third");

            // And back: all of device 1 into device 0, on a stream of device 1.
            Cuda.setDevice(1);
            try (CudaStream onDeviceOne = CudaStream.create()) {
                onDeviceOne.copyAsync(onOne.tensor(DType.BF16), onZero.tensor(DType.BF16));
                onDeviceOne.synchronize();
            } finally {
                Cuda.setDevice(0);
            }
            assertSameBytes(expected, download(onZero), "device 1 -> device 0");
        }
    }

    @Test
    void aCopyMovesBytesWhateverTheElementTypes() {
        MemorySegment data = TestData.random(arena, DType.INT64, 1000, random);
        MemorySegment other = TestData.random(arena, DType.INT64, 1000, random);
        try (DeviceMemory from = upload(0, data); DeviceMemory to = upload(0, other)) {
            stream.copyAsync(from.tensor(DType.INT64), to.tensor(DType.FP16)); // 8000 bytes both
            stream.synchronize();
            assertSameBytes(data, download(to), "INT64 x 1000 -> FP16 x 4000");
        }
    }

    @Test
    void laterWorkOnTheStreamSeesTheCopy() {
        MemorySegment data = TestData.random(arena, DType.INT32, COUNT, random);
        MemorySegment junk = TestData.random(arena, DType.INT32, COUNT, random);
        try (DeviceMemory from = upload(0, data); DeviceMemory middle = upload(0, junk);
             DeviceMemory to = upload(0, junk)) {
            // Two copies in a row on one stream: the second reads what the first wrote.
            stream.copyAsync(from.tensor(DType.INT32), middle.tensor(DType.INT32));
            stream.copyAsync(middle.tensor(DType.INT32), to.tensor(DType.INT32));
            stream.synchronize();
            assertSameBytes(data, download(to), "from -> middle -> to");
        }
    }

    @Test
    void badArgumentsAreRefusedWithTheirValues() {
        try (DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 1024)) {
            DeviceTensor all = memory.tensor(DType.FP32);
            DeviceTensor half = all.slice(0, 512);
            assertEquals("copyAsync: from has 4096 bytes (FP32 x 1024) but to has 2048 bytes (FP32 x 512)",
                    assertThrows(IllegalArgumentException.class, () -> stream.copyAsync(all, half)).getMessage());
            assertEquals("copyAsync: from has 2048 bytes (FP32 x 512) but to has 2046 bytes (BF16 x 1023)",
                    assertThrows(IllegalArgumentException.class, () -> stream.copyAsync(half,
                            new DeviceTensor(all.address() + 2048, DType.BF16, 1023))).getMessage());
            DeviceTensor shifted = all.slice(256, 512);
            assertEquals("copyAsync: from [0x" + Long.toHexString(half.address()) + ", +2048) and to [0x"
                    + Long.toHexString(shifted.address()) + ", +2048) overlap",
                    assertThrows(IllegalArgumentException.class, () -> stream.copyAsync(half, shifted)).getMessage());
            assertThrows(IllegalArgumentException.class, () -> stream.copyAsync(half, half), "a copy onto itself");
            assertEquals("copyAsync: from is null",
                    assertThrows(NullPointerException.class, () -> stream.copyAsync(null, half)).getMessage());
            assertEquals("copyAsync: to is null",
                    assertThrows(NullPointerException.class, () -> stream.copyAsync(half, null)).getMessage());
            // Adjacent, not overlapping: allowed.
            stream.copyAsync(half, all.slice(512, 512));
            // Empty tensors (address 0 allowed) enqueue nothing.
            stream.copyAsync(new DeviceTensor(0, DType.FP32, 0), new DeviceTensor(0, DType.INT8, 0));
            stream.synchronize();
        }
        CudaStream closed = CudaStream.create();
        closed.close();
        try (DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 16)) {
            DeviceTensor all = memory.tensor(DType.FP32);
            IllegalStateException e = assertThrows(IllegalStateException.class,
                    () -> closed.copyAsync(all.slice(0, 8), all.slice(8, 8)));
            assertTrue(e.getMessage().startsWith("copyAsync: ") && e.getMessage().contains("closed"), e.getMessage());
        }
    }
}
