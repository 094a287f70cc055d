package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.EnumMap;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** Value types of the API: no native code involved. */
class ValuesTest {

    @Test
    void tensorShardsAndSlices() {
        DeviceTensor t = new DeviceTensor(0x1000, DType.BF16, 12);
        assertEquals(24, t.bytes());
        assertEquals(new DeviceTensor(0x1000 + 2 * 4 * 2, DType.BF16, 4), t.shard(2, 3));
        assertEquals(new DeviceTensor(0x1000 + 5 * 2, DType.BF16, 3), t.slice(5, 3));
    }

    @Test
    void tensorRejectsBadShapesWithTheValues() {
        DeviceTensor t = new DeviceTensor(0x1000, DType.FP32, 1000);
        assertEquals("shard: 1000 elements not divisible into 3 shards",
                assertThrows(IllegalArgumentException.class, () -> t.shard(0, 3)).getMessage());
        assertEquals("shard: index 4 out of range [0, 4)",
                assertThrows(IllegalArgumentException.class, () -> t.shard(4, 4)).getMessage());
        assertEquals("slice: [990, 990 + 20) out of range for 1000 elements",
                assertThrows(IllegalArgumentException.class, () -> t.slice(990, 20)).getMessage());
        assertEquals("DeviceTensor: address is 0 for 5 elements",
                assertThrows(IllegalArgumentException.class, () -> new DeviceTensor(0, DType.FP32, 5)).getMessage());
        assertEquals("DeviceTensor: count -1 is negative",
                assertThrows(IllegalArgumentException.class, () -> new DeviceTensor(8, DType.FP32, -1)).getMessage());
        assertThrows(NullPointerException.class, () -> new DeviceTensor(8, null, 1));
    }

    @Test
    void dtypesMapToNcclAndKnowTheirSizes() {
        assertEquals(4, DType.FP32.size());
        assertEquals(2, DType.BF16.size());
        assertEquals(1, DType.FP8_E4M3.size());
        assertEquals(8, DType.UINT64.size());
        assertTrue(DType.FP8_E5M2.isFloatingPoint());
        assertFalse(DType.INT32.isFloatingPoint());
        assertFalse(DType.BYTE.isReducible());
    }

    @Test
    void dtypesAndOpsMapToNcclHeaderValues() {
        // ncclDataType_t and ncclRedOp_t of nccl.h (2.24+), written out here as the reference.
        Map<DType, Integer> types = new EnumMap<>(DType.class);
        types.putAll(Map.of(DType.INT8, 0, DType.UINT8, 1, DType.INT32, 2, DType.UINT32, 3, DType.INT64, 4,
                DType.UINT64, 5, DType.FP16, 6, DType.FP32, 7, DType.FP64, 8, DType.BF16, 9));
        types.putAll(Map.of(DType.FP8_E4M3, 10, DType.FP8_E5M2, 11, DType.BYTE, 1));
        assertEquals(EnumSet.allOf(DType.class), types.keySet(), "a DType without a reference value");
        types.forEach((dtype, nccl) -> assertEquals(nccl, NcclTypes.of(dtype), dtype.toString()));
        Map<ReduceOp, Integer> ops = Map.of(ReduceOp.SUM, 0, ReduceOp.PROD, 1, ReduceOp.MAX, 2, ReduceOp.MIN, 3,
                ReduceOp.AVG, 4);
        assertEquals(Set.of(ReduceOp.values()), ops.keySet(), "a ReduceOp without a reference value");
        ops.forEach((op, nccl) -> assertEquals(nccl, NcclTypes.of(op), op.toString()));
    }

    @Test
    void uniqueIdBecomesTheSame128BytesForNccl() {
        byte[] bytes = new byte[UniqueId.BYTES];
        new Random(11).nextBytes(bytes);
        UniqueId id = UniqueId.fromBytes(bytes);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment segment = NcclTypes.segment(id, arena);
            assertEquals(UniqueId.BYTES, segment.byteSize());
            assertArrayEquals(bytes, segment.toArray(ValueLayout.JAVA_BYTE));
        }
    }
}
