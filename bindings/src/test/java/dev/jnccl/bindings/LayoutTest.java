package dev.jnccl.bindings;

import static java.lang.foreign.MemoryLayout.PathElement.groupElement;
import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.jnccl.bindings.cuda.cudaPointerAttributes;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.bindings.nccl.ncclConfig_t;
import dev.jnccl.bindings.nccl.ncclUniqueId;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import org.junit.jupiter.api.Test;

/** The generated layouts must match the C headers: NCCL reads these structs by offset. */
class LayoutTest {

    @Test
    void uniqueIdIs128BytesPassedByValue() {
        assertEquals(128, Nccl.NCCL_UNIQUE_ID_BYTES());
        assertEquals(128, ncclUniqueId.layout().byteSize());
    }

    @Test
    void configMatchesTheNccl2_28Header() {
        // size_t size; unsigned magic, version; int blocking, cgaClusterSize, minCTAs, maxCTAs;
        // const char *netName; int splitShare, trafficClass; const char *commName; 6 ints.
        assertEquals(80, ncclConfig_t.layout().byteSize());
        assertEquals(0, offset("size"));
        assertEquals(8, offset("magic"));
        assertEquals(12, offset("version"));
        assertEquals(16, offset("blocking"));
        assertEquals(32, offset("netName"));
        assertEquals(40, offset("splitShare"));
        assertEquals(48, offset("commName"));
        assertEquals(56, offset("collnetEnable"));
        assertEquals(76, offset("nvlinkCentricSched"));
    }

    @Test
    void configInitializerFillsLikeTheMacro() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment config = NcclConfigs.allocate(arena);
            assertEquals(80, ncclConfig_t.size(config));
            assertEquals(0xcafebeef, ncclConfig_t.magic(config));
            assertEquals(22803, ncclConfig_t.version(config));
            assertEquals(Integer.MIN_VALUE, ncclConfig_t.blocking(config));
            assertEquals(Integer.MIN_VALUE, ncclConfig_t.nvlinkCentricSched(config));
            assertEquals(MemorySegment.NULL, ncclConfig_t.netName(config));
            assertEquals(MemorySegment.NULL, ncclConfig_t.commName(config));
        }
    }

    @Test
    void pointerAttributesMatchTheCuda13Header() {
        assertEquals(88, cudaPointerAttributes.layout().byteSize());
        assertEquals(4, cudaPointerAttributes.layout().byteOffset(groupElement("device")));
        assertEquals(8, cudaPointerAttributes.layout().byteOffset(groupElement("devicePointer")));
        assertEquals(16, cudaPointerAttributes.layout().byteOffset(groupElement("hostPointer")));
    }

    private static long offset(String field) {
        return ncclConfig_t.layout().byteOffset(groupElement(field));
    }
}
