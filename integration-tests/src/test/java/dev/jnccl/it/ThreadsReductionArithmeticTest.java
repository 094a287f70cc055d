package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.testsupport.LowPrecision;
import dev.jnccl.threads.ThreadsOptions;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Pins the arithmetic of reductions to NCCL's, bit for bit, on whichever backend runs: the host
 * emulation in CI and real NCCL on a GPU (NCCL 2.30 with several ranks on one GPU:
 * {@code scripts/gpu/gpu-test.sh --threads-multi-rank}). A reduce-scatter's chunk for rank r is
 * reduced along NCCL's ring from rank r + 1 to r, every step rounded in the type; the average is
 * NCCL's pre-multiplied sum with 1/n rounded to the type. At 3 ranks that differs from the exact
 * mean, which is what this pins (found on an H200 with NCCL 2.30.7, see
 * bindings/src/test/c/reduction_dump.c). A {@linkplain ReduceOp#scaledSum scaled sum} is the same
 * pre-multiplied sum with the user's factor rounded to the type.
 *
 * <p>Inputs are random bit patterns of moderate magnitude (about 0.25 to 8, both signs, every
 * mantissa bit used), so rounding happens at almost every step.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsReductionArithmeticTest {
    private static final int SHARD = 1000;

    static Stream<Arguments> cases() {
        List<Arguments> cases = new ArrayList<>();
        for (int world : new int[] {2, 3, 4, 8}) {
            for (DType dtype : new DType[] {DType.FP32, DType.FP16, DType.BF16, DType.FP8_E4M3, DType.FP8_E5M2}) {
                cases.add(Arguments.of(world, dtype));
            }
        }
        return cases.stream();
    }

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("cases")
    void reduceScatterSumAverageAndScaledSumMatchNcclBitForBit(int world, DType dtype) {
        Packs.run(world, ThreadsOptions.defaults(), c -> {
            int n = c.world;
            int size = dtype.size();
            for (ReduceOp op : new ReduceOp[] {ReduceOp.SUM, ReduceOp.AVG, ReduceOp.scaledSum(0.3),
                    ReduceOp.scaledSum(-1.7)}) {
                List<long[]> inputs = new ArrayList<>();
                for (int r = 0; r < n; r++) {
                    inputs.add(bits(dtype, new SplittableRandom(c.seed(r, "arith." + dtype + "." + op)), n * SHARD));
                }
                DeviceTensor tensor = c.alloc(dtype, (long) n * SHARD);
                DeviceMemory view = DeviceMemory.wrap(tensor.address(), tensor.bytes(), c.comm.device());
                view.copyFromHost(MemorySegment.ofArray(toBytes(inputs.get(c.rank), size)));
                CudaEvent ready = c.event();
                CudaEvent done = c.event();
                c.compute().record(ready);
                try (Transaction tx = c.comm.begin(ready)) {
                    tx.reduceScatter(tensor, op);
                    tx.execute(done);
                }
                c.comm.await(done);
                byte[] got = new byte[SHARD * size];
                view.copyToHost(MemorySegment.ofArray(got), (long) c.rank * SHARD * size);
                int mismatches = 0;
                StringBuilder first = new StringBuilder();
                for (int i = 0; i < SHARD; i++) {
                    int index = c.rank * SHARD + i;
                    long want = reference(dtype, op, inputs, index, (c.rank + 1) % n);
                    long have = element(got, i, size);
                    if (want != have && mismatches++ < 4) {
                        first.append(String.format("%n  element %d: 0x%x (%s), NCCL's ring arithmetic gives 0x%x (%s)",
                                index, have, value(dtype, have), want, value(dtype, want)));
                    }
                }
                int bad = mismatches;
                assertEquals(0, bad, () -> c.what(dtype + " reduceScatter " + op + ": " + bad + " of " + SHARD
                        + " elements differ (backend " + c.comm.backend() + ")" + first));
            }
        });
    }

    /** NCCL's reduction of element {@code index}: ring order from {@code first}, each step rounded. */
    static long reference(DType dtype, ReduceOp op, List<long[]> inputs, int index, int first) {
        int n = inputs.size();
        boolean scaled = op.kind() == ReduceOp.Kind.SCALED_SUM;
        boolean premultiplied = scaled || op == ReduceOp.AVG;
        if (dtype == DType.FP32) {
            float scale = scaled ? (float) op.factor() : 1.0f / n;
            float acc = Float.intBitsToFloat((int) inputs.get(first)[index]);
            acc = premultiplied ? acc * scale : acc;
            for (int k = 1; k < n; k++) {
                float x = Float.intBitsToFloat((int) inputs.get((first + k) % n)[index]);
                acc = premultiplied ? Math.fma(x, scale, acc) : acc + x;
            }
            return Float.floatToRawIntBits(acc) & 0xFFFFFFFFL;
        }
        boolean fp8 = dtype.size() == 1;
        float scale = round(dtype, scaled ? (float) op.factor() : 1.0f / n);
        float acc = decode(dtype, inputs.get(first)[index]);
        acc = premultiplied ? round(dtype, acc * scale) : acc;
        for (int k = 1; k < n; k++) {
            float x = decode(dtype, inputs.get((first + k) % n)[index]);
            if (premultiplied) {
                // 16-bit types: one fused multiply-add (__hfma); fp8: the product is rounded first.
                acc = round(dtype, fp8 ? acc + round(dtype, x * scale) : Math.fma(x, scale, acc));
            } else {
                acc = round(dtype, acc + x);
            }
        }
        return encode(dtype, acc);
    }

    /** Random values of magnitude about 0.25 .. 8 as the type's bit patterns. */
    private static long[] bits(DType dtype, SplittableRandom random, int count) {
        int[] layout = switch (dtype) { // exponent bits, mantissa bits, lowest and highest exponent field
            case FP32 -> new int[] {8, 23, 125, 129};
            case FP16 -> new int[] {5, 10, 13, 17};
            case BF16 -> new int[] {8, 7, 125, 129};
            case FP8_E4M3 -> new int[] {4, 3, 5, 9};
            case FP8_E5M2 -> new int[] {5, 2, 13, 17};
            default -> throw new IllegalArgumentException(dtype.toString());
        };
        long[] values = new long[count];
        for (int i = 0; i < count; i++) {
            long sign = random.nextInt(2);
            long exponent = layout[2] + random.nextInt(layout[3] - layout[2] + 1);
            long mantissa = random.nextLong() & ((1L << layout[1]) - 1);
            values[i] = (sign << (layout[0] + layout[1])) | (exponent << layout[1]) | mantissa;
        }
        return values;
    }

    private static float decode(DType dtype, long bits) {
        return switch (dtype) {
            case FP16 -> LowPrecision.halfToFloat((short) bits);
            case BF16 -> LowPrecision.bf16ToFloat((short) bits);
            case FP8_E4M3 -> LowPrecision.e4m3ToFloat((byte) bits);
            case FP8_E5M2 -> LowPrecision.e5m2ToFloat((byte) bits);
            default -> Float.intBitsToFloat((int) bits);
        };
    }

    private static long encode(DType dtype, float value) {
        return switch (dtype) {
            case FP16 -> LowPrecision.floatToHalf(value) & 0xFFFFL;
            case BF16 -> LowPrecision.floatToBf16(value) & 0xFFFFL;
            case FP8_E4M3 -> LowPrecision.floatToE4m3(value) & 0xFFL;
            case FP8_E5M2 -> LowPrecision.floatToE5m2(value) & 0xFFL;
            default -> Float.floatToRawIntBits(value) & 0xFFFFFFFFL;
        };
    }

    private static float round(DType dtype, float value) {
        return decode(dtype, encode(dtype, value));
    }

    private static String value(DType dtype, long bits) {
        return Float.toString(decode(dtype, bits));
    }

    private static byte[] toBytes(long[] values, int size) {
        byte[] bytes = new byte[values.length * size];
        for (int i = 0; i < values.length; i++) {
            for (int b = 0; b < size; b++) {
                bytes[i * size + b] = (byte) (values[i] >>> (8 * b)); // little endian, as the device
            }
        }
        return bytes;
    }

    private static long element(byte[] bytes, int index, int size) {
        long value = 0;
        for (int b = 0; b < size; b++) {
            value |= (bytes[index * size + b] & 0xFFL) << (8 * b);
        }
        return value;
    }
}
