package dev.jnccl;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Random;

/** Random, finite test data for every {@link DType}, as raw little-endian bytes. */
final class TestData {
    private TestData() {}

    static MemorySegment random(Arena arena, DType dtype, long count, Random random) {
        MemorySegment data = arena.allocate(count * dtype.size(), 16);
        for (long i = 0; i < count; i++) {
            long offset = i * dtype.size();
            switch (dtype) {
                case FP32 -> data.set(ValueLayout.JAVA_FLOAT_UNALIGNED, offset, random.nextFloat() * 4 - 2);
                case FP64 -> data.set(ValueLayout.JAVA_DOUBLE_UNALIGNED, offset, random.nextDouble() * 4 - 2);
                case FP16 -> data.set(ValueLayout.JAVA_SHORT_UNALIGNED, offset,
                        Float.floatToFloat16(random.nextFloat() * 4 - 2));
                case BF16 -> data.set(ValueLayout.JAVA_SHORT_UNALIGNED, offset,
                        (short) (Float.floatToRawIntBits(random.nextFloat() * 4 - 2) >>> 16));
                // Finite fp8 codes only: e4m3 has NaN at S.1111.111; e5m2 has Inf/NaN at exponent 11111.
                case FP8_E4M3 -> data.set(ValueLayout.JAVA_BYTE, offset, (byte) (random.nextInt(0x7f) | (random.nextBoolean() ? 0x80 : 0)));
                case FP8_E5M2 -> data.set(ValueLayout.JAVA_BYTE, offset, (byte) (random.nextInt(0x7c) | (random.nextBoolean() ? 0x80 : 0)));
                case INT8, UINT8, BYTE -> data.set(ValueLayout.JAVA_BYTE, offset, (byte) random.nextInt());
                case INT32, UINT32 -> data.set(ValueLayout.JAVA_INT_UNALIGNED, offset, random.nextInt());
                case INT64, UINT64 -> data.set(ValueLayout.JAVA_LONG_UNALIGNED, offset, random.nextLong());
            }
        }
        return data;
    }
}
