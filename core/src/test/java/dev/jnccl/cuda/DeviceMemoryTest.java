package dev.jnccl.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Random;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * {@link DeviceMemory} and the tensors it gives: zero-byte allocations, byte sizes that overflow,
 * tensors that know their device and refuse to be used once their memory is closed, and one
 * message for every use of a closed stream, event or memory.
 */
class DeviceMemoryTest {

    @AfterEach
    void deviceZero() {
        Cuda.setDevice(0);
    }

    @Test
    void zeroBytesAllocateAndCloseAndGiveEmptyTensors() {
        Cuda.setDevice(0);
        try (DeviceMemory empty = DeviceMemory.allocate(0); DeviceMemory typed = DeviceMemory.allocate(DType.FP32, 0);
             CudaStream stream = CudaStream.create(); Arena arena = Arena.ofConfined()) {
            assertEquals(0, empty.bytes());
            assertEquals(0, empty.address());
            assertEquals(0, typed.bytes());
            DeviceTensor tensor = empty.tensor(DType.FP32);
            assertEquals(0, tensor.count());
            assertSame(empty, tensor.memory());
            assertEquals(0, tensor.device());
            empty.copyFromHost(arena.allocate(0));
            empty.copyToHost(arena.allocate(0));
            empty.fill((byte) 1, stream);
            stream.copyAsync(tensor, typed.tensor(DType.INT32));
            stream.synchronize();
            assertEquals("copyFromHost: 1 bytes at offset 0 do not fit in 0 bytes of device memory", assertThrows(
                    IllegalArgumentException.class, () -> empty.copyFromHost(arena.allocate(1))).getMessage());
            empty.close();
            empty.close();
            assertTrue(empty.isClosed());
        }
    }

    @Test
    void badSizesNameTheArgumentAndValues() {
        assertEquals("allocate: bytes -1 is negative",
                assertThrows(IllegalArgumentException.class, () -> DeviceMemory.allocate(-1)).getMessage());
        assertEquals("allocate: count -3 is negative",
                assertThrows(IllegalArgumentException.class, () -> DeviceMemory.allocate(DType.FP16, -3)).getMessage());
        long count = Long.MAX_VALUE / 4;
        assertEquals("allocate: count " + count + " of FP64 (8 bytes each) overflows a long byte size: at most "
                + Long.MAX_VALUE / 8 + " elements", assertThrows(IllegalArgumentException.class,
                () -> DeviceMemory.allocate(DType.FP64, count)).getMessage());
    }

    @Test
    void aTensorMustCoverTheMemoryWithWholeElements() {
        Cuda.setDevice(0);
        try (DeviceMemory twelve = DeviceMemory.allocate(12)) {
            assertEquals("tensor: the memory's 12 bytes are not a whole number of FP64 elements (8 bytes each):"
                    + " allocate a multiple of 8 bytes, e.g. with allocate(FP64, count)", assertThrows(
                    IllegalArgumentException.class, () -> twelve.tensor(DType.FP64)).getMessage());
            assertEquals(3, twelve.tensor(DType.FP32).count());
            assertEquals(6, twelve.tensor(DType.FP16).count());
            assertEquals(2, twelve.tensor(DType.FP32).slice(1, 2).count());
        }
    }

    @Test
    void tensorsKnowTheirDeviceAndShardsKeepTheirMemory() {
        int device = Cuda.deviceCount() > 1 ? 1 : 0;
        Cuda.setDevice(device);
        try (DeviceMemory memory = DeviceMemory.allocate(DType.INT32, 12)) {
            DeviceTensor tensor = memory.tensor(DType.INT32);
            assertEquals(device, tensor.device());
            DeviceTensor shard = tensor.shard(2, 3);
            DeviceTensor slice = tensor.slice(1, 5);
            assertSame(memory, shard.memory());
            assertSame(memory, slice.memory());
            assertEquals(device, shard.device());
            assertEquals(memory.address() + 8 * 4, shard.address());
            assertEquals("DeviceTensor[0x" + Long.toHexString(shard.address()) + ", INT32 x 4, device " + device + "]",
                    shard.toString());
            DeviceTensor raw = new DeviceTensor(memory.address(), DType.INT32, 12);
            assertNull(raw.memory());
            assertEquals(-1, raw.device());
            assertFalse(raw.equals(tensor), "a raw view and a view of known memory are different values");
            assertEquals("DeviceTensor: [0x" + Long.toHexString(memory.address() + 4) + ", +48) is not inside "
                    + memory, assertThrows(IllegalArgumentException.class,
                    () -> new DeviceTensor(memory.address() + 4, DType.INT32, 12, memory)).getMessage());
        }
    }

    @Test
    void copyAsyncRefusesATensorWhoseMemoryWasClosed() {
        Cuda.setDevice(0);
        Random random = new Random();
        try (CudaStream stream = CudaStream.create(); DeviceMemory to = DeviceMemory.allocate(64);
             Arena arena = Arena.ofConfined()) {
            DeviceMemory from = DeviceMemory.allocate(64);
            MemorySegment data = arena.allocate(64);
            for (int i = 0; i < 64; i++) {
                data.set(ValueLayout.JAVA_BYTE, i, (byte) random.nextInt());
            }
            from.copyFromHost(data);
            DeviceTensor source = from.tensor(DType.BYTE);
            DeviceTensor target = to.tensor(DType.BYTE);
            stream.copyAsync(source, target);
            stream.synchronize();
            MemorySegment back = arena.allocate(64);
            to.copyToHost(back);
            for (int i = 0; i < 64; i++) {
                assertEquals(data.get(ValueLayout.JAVA_BYTE, i), back.get(ValueLayout.JAVA_BYTE, i), "byte " + i);
            }
            from.close();
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> stream.copyAsync(source, target));
            assertEquals("copyAsync: from " + source + " views " + from + ", which was closed: its memory was freed",
                    e.getMessage());
            e = assertThrows(IllegalStateException.class, () -> stream.copyAsync(target, source));
            assertTrue(e.getMessage().startsWith("copyAsync: to " + source + " views "), e.getMessage());
        }
    }

    @Test
    void everyUseAfterCloseSaysWhichObjectAndWhichCall() {
        Cuda.setDevice(0);
        CudaStream stream = CudaStream.create();
        CudaEvent event = CudaEvent.create();
        DeviceMemory memory = DeviceMemory.allocate(16);
        stream.close();
        event.close();
        memory.close();
        assertEquals("synchronize: stream " + stream + " is closed",
                assertThrows(IllegalStateException.class, stream::synchronize).getMessage());
        assertEquals("handle: stream " + stream + " is closed",
                assertThrows(IllegalStateException.class, stream::handle).getMessage());
        assertEquals("isComplete: event " + event + " is closed",
                assertThrows(IllegalStateException.class, event::isComplete).getMessage());
        assertEquals("synchronize: event " + event + " is closed",
                assertThrows(IllegalStateException.class, event::synchronize).getMessage());
        assertEquals("tensor: device memory " + memory + " is closed",
                assertThrows(IllegalStateException.class, () -> memory.tensor(DType.FP32)).getMessage());
        assertTrue(stream.toString().endsWith(", closed]"), stream.toString());
    }

    @Test
    void closingAWrapperLeavesTheForeignHandleAlive() {
        Cuda.setDevice(0);
        try (CudaStream owner = CudaStream.create(); CudaEvent event = CudaEvent.create();
             DeviceMemory memory = DeviceMemory.allocate(32)) {
            CudaStream wrapped = CudaStream.wrap(owner.handle(), 0);
            DeviceMemory wrappedMemory = DeviceMemory.wrap(memory.address(), 32, 0);
            DeviceTensor view = wrappedMemory.tensor(DType.BYTE);
            assertFalse(wrapped.isOwned());
            wrapped.close();
            wrappedMemory.close();
            owner.record(event); // the stream was not destroyed
            owner.synchronize();
            assertTrue(event.isComplete());
            memory.fill((byte) 2, owner); // nor the memory freed
            owner.synchronize();
            assertEquals("copyAsync: to " + view + " views " + wrappedMemory
                    + ", which was closed: jnccl no longer uses the wrapped pointer", assertThrows(
                    IllegalStateException.class, () -> owner.copyAsync(memory.tensor(DType.BYTE), view)).getMessage());
            assertEquals("wrap: stream handle is 0 (the legacy default stream); pass a created stream",
                    assertThrows(IllegalArgumentException.class, () -> CudaStream.wrap(0L, 0)).getMessage());
            assertEquals("wrap: device -1 is negative",
                    assertThrows(IllegalArgumentException.class, () -> CudaEvent.wrap(event.handle(), -1)).getMessage());
        }
    }
}
