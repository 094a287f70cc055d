package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.DeviceMemory;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The checks of a communicator's tensor arguments ({@link Checks}): a tensor on another device
 * than the communicator's, a missing one, and one whose memory was closed are refused with a
 * message naming the operation and the argument.
 */
class TensorsTest {

    @AfterEach
    void deviceZero() {
        Cuda.setDevice(0);
    }

    @Test
    void usableChecksRefuseAnotherDeviceAndClosedMemory() {
        assumeTrue(Cuda.deviceCount() > 1, "needs two devices");
        Cuda.setDevice(1);
        DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 8);
        DeviceTensor shard = memory.tensor(DType.FP32).shard(0, 2);
        new Checks(3, 4, 1).requireUsable("allGather", "shard", shard);
        assertEquals("allGather: shard is on device 1 but the communicator of rank 0 is on device 0",
                assertThrows(IllegalArgumentException.class,
                        () -> new Checks(0, 4, 0).requireUsable("allGather", "shard", shard)).getMessage());
        new Checks(0, 4, 0).requireUsable("allGather", "shard", new DeviceTensor(shard.address(), DType.FP32, 4));
        assertEquals("allGather: shard is null", assertThrows(NullPointerException.class,
                () -> new Checks(0, 4, 0).requireUsable("allGather", "shard", null)).getMessage());
        memory.close();
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> new Checks(0, 4, 1).requireUsable("allGather", "shard", shard));
        assertEquals("allGather: shard " + shard + " views " + memory + ", which was closed: its memory was freed",
                e.getMessage());
        assertTrue(shard.toString().endsWith(", device 1, memory closed]"), shard.toString());
        assertEquals("DeviceTensor: " + memory + " is closed: a view of it would use freed memory",
                assertThrows(IllegalStateException.class, () -> shard.shard(0, 2)).getMessage());
    }
}
