package dev.jnccl.it;

import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.cuda.DeviceMemory;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.extension.AfterEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * Device memory of the ranks of a pack that is meant to fail, freed by the test only after the
 * pack has ended (a JUnit extension: register it with {@code @RegisterExtension}; it frees after
 * each test): until then a peer's stream may still use it.
 */
final class PackMemory implements AfterEachCallback {
    private final List<DeviceMemory> memory = new CopyOnWriteArrayList<>();

    /** FP32 memory on the calling rank's device, filled with nonzero data. */
    DeviceTensor fp32(long count) {
        DeviceMemory m = DeviceMemory.allocate(DType.FP32, count);
        memory.add(m);
        m.copyFromHost(MemorySegment.ofArray(Data.fp32(count * 31 + m.device(), (int) count)));
        return m.tensor(DType.FP32).slice(0, count);
    }

    /** INT32 memory on the calling rank's device, filled with nonzero data. */
    DeviceTensor int32(long count) {
        DeviceMemory m = DeviceMemory.allocate(DType.INT32, count);
        memory.add(m);
        m.copyFromHost(MemorySegment.ofArray(Data.int32(count * 37 + m.device(), (int) count)));
        return m.tensor(DType.INT32).slice(0, count);
    }

    /** Frees everything allocated so far; a failure is printed, not thrown (the test's own outcome matters). */
    @Override
    public void afterEach(ExtensionContext context) {
        for (DeviceMemory m : memory) {
            try {
                m.close();
            } catch (RuntimeException e) {
                System.err.println("freeing " + m + " failed: " + e);
            }
        }
        memory.clear();
    }
}
