package dev.jnccl.bindings;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED;
import static java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED;
import static java.lang.foreign.ValueLayout.JAVA_SHORT_UNALIGNED;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.bindings.nccl.ncclUniqueId;
import dev.jnccl.testsupport.LowPrecision;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.function.BooleanSupplier;
import java.util.stream.Stream;

/**
 * Shared plumbing of the Emulation* tests: loading, error checks on raw return codes, device memory,
 * libc environment changes, resource counts, ranks as platform threads, and the element types and
 * reduction ops of NCCL with a reference implementation of the emulation's arithmetic.
 */
final class EmulationSupport {
    private EmulationSupport() {}

    // ------------------------------------------------------------------ loading

    static LoadedLibraries libraries() {
        return NativeLibraries.load();
    }

    static boolean isHost() {
        return libraries().backend() == BackendSetting.HOST;
    }

    static void assumeHost() {
        LoadedLibraries libraries = libraries();
        assumeTrue(libraries.backend() == BackendSetting.HOST, "this test drives the host emulation (fault injection,"
                + " virtual devices, host-visible memory); the backend here is " + libraries.backend().id());
    }

    // ------------------------------------------------------------------ return codes

    static String cudaText(int error) {
        return error + " (" + CudaRuntime.cudaGetErrorString(error).reinterpret(Integer.MAX_VALUE).getString(0) + ")";
    }

    static String ncclText(int result) {
        return result + " (" + Nccl.ncclGetErrorString(result).reinterpret(Integer.MAX_VALUE).getString(0) + ")";
    }

    static String lastError(MemorySegment comm) {
        MemorySegment text = Nccl.ncclGetLastError(comm);
        return text.equals(MemorySegment.NULL) ? "" : text.reinterpret(Integer.MAX_VALUE).getString(0);
    }

    static void cuda(int error, String call) {
        if (error != 0) {
            throw new AssertionError(call + " failed with CUDA error " + cudaText(error));
        }
    }

    static void nccl(int result, String call) {
        if (result != 0) {
            throw new AssertionError(call + " failed with NCCL result " + ncclText(result) + ": "
                    + lastError(MemorySegment.NULL));
        }
    }

    static void assertNccl(int expected, int actual, String call) {
        assertEquals(expected, actual, () -> call + ": expected NCCL result " + ncclText(expected) + ", got "
                + ncclText(actual) + " (last error: " + lastError(MemorySegment.NULL) + ")");
    }

    static void assertCuda(int expected, int actual, String call) {
        assertEquals(expected, actual, () -> call + ": expected CUDA error " + cudaText(expected) + ", got "
                + cudaText(actual));
    }

    // ------------------------------------------------------------------ devices, memory, streams

    static int deviceCount() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment count = arena.allocate(JAVA_INT);
            cuda(CudaRuntime.cudaGetDeviceCount(count), "cudaGetDeviceCount");
            return count.get(JAVA_INT, 0);
        }
    }

    static MemorySegment deviceMalloc(long bytes) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ADDRESS);
            cuda(CudaRuntime.cudaMalloc(out, Math.max(bytes, 1)), "cudaMalloc(" + bytes + ")");
            return out.get(ADDRESS, 0);
        }
    }

    static void free(MemorySegment device) {
        cuda(CudaRuntime.cudaFree(device), "cudaFree");
    }

    static void toDevice(MemorySegment device, MemorySegment host) {
        cuda(CudaRuntime.cudaMemcpy(device, host, host.byteSize(), CudaRuntime.cudaMemcpyHostToDevice()),
                "cudaMemcpy H2D");
    }

    static void toHost(MemorySegment host, MemorySegment device) {
        cuda(CudaRuntime.cudaMemcpy(host, device, host.byteSize(), CudaRuntime.cudaMemcpyDeviceToHost()),
                "cudaMemcpy D2H");
    }

    static MemorySegment newStream() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ADDRESS);
            cuda(CudaRuntime.cudaStreamCreateWithFlags(out, CudaRuntime.cudaStreamNonBlocking()), "cudaStreamCreate");
            return out.get(ADDRESS, 0);
        }
    }

    static MemorySegment newEvent(int flags) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ADDRESS);
            cuda(CudaRuntime.cudaEventCreateWithFlags(out, flags), "cudaEventCreateWithFlags");
            return out.get(ADDRESS, 0);
        }
    }

    static MemorySegment newUniqueId(Arena arena) {
        MemorySegment id = ncclUniqueId.allocate(arena);
        nccl(Nccl.ncclGetUniqueId(id), "ncclGetUniqueId");
        return id;
    }

    static String hex(MemorySegment id) {
        return HexFormat.of().formatHex(id.toArray(JAVA_BYTE));
    }

    static MemorySegment uniqueIdFromHex(String hex, Arena arena) {
        MemorySegment id = ncclUniqueId.allocate(arena);
        byte[] bytes = HexFormat.of().parseHex(hex);
        assertEquals(id.byteSize(), bytes.length, "unique id length");
        MemorySegment.copy(MemorySegment.ofArray(bytes), 0, id, 0, bytes.length);
        return id;
    }

    /** ncclCommInitRank on the calling thread, after cudaSetDevice(device). */
    static MemorySegment initRank(MemorySegment id, int nranks, int rank, int device) {
        cuda(CudaRuntime.cudaSetDevice(device), "cudaSetDevice(" + device + ")");
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ADDRESS);
            nccl(Nccl.ncclCommInitRank(out, nranks, id, rank), "ncclCommInitRank(rank " + rank + " of " + nranks + ")");
            return out.get(ADDRESS, 0);
        }
    }

    static int asyncError(MemorySegment comm) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_INT);
            nccl(Nccl.ncclCommGetAsyncError(comm, out), "ncclCommGetAsyncError");
            return out.get(JAVA_INT, 0);
        }
    }

    static int commInt(MemorySegment comm, String what) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_INT);
            int result = switch (what) {
                case "count" -> Nccl.ncclCommCount(comm, out);
                case "rank" -> Nccl.ncclCommUserRank(comm, out);
                case "device" -> Nccl.ncclCommCuDevice(comm, out);
                default -> throw new IllegalArgumentException(what);
            };
            nccl(result, "ncclComm " + what);
            return out.get(JAVA_INT, 0);
        }
    }

    /** Polls until the condition holds or the deadline passes; returns whether it held. */
    static boolean await(Duration limit, BooleanSupplier condition) {
        long deadline = System.nanoTime() + limit.toNanos();
        while (true) {
            if (condition.getAsBoolean()) {
                return true;
            }
            if (System.nanoTime() - deadline > 0) {
                return false;
            }
            try {
                Thread.sleep(2);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            }
        }
    }

    /** Runs the call on a fresh daemon thread and fails (leaving the thread behind) if it takes longer than limit. */
    static <T> T withinTime(Duration limit, String what, java.util.concurrent.Callable<T> call) throws Exception {
        FutureTask<T> task = new FutureTask<>(call);
        Thread thread = Thread.ofPlatform().daemon().name("bounded-" + what).start(task);
        try {
            return task.get(limit.toMillis(), TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            throw new AssertionError(what + " did not return within " + limit + " (thread " + thread.getName()
                    + " left blocked)");
        } catch (ExecutionException e) {
            if (e.getCause() instanceof Exception ex) {
                throw ex;
            }
            throw new AssertionError(what + " failed", e.getCause());
        }
    }

    // ------------------------------------------------------------------ resource counts

    static int threadCount() {
        return countEntries(Path.of("/proc/self/task"));
    }

    static int fdCount() {
        return countEntries(Path.of("/proc/self/fd"));
    }

    static Set<String> shmSegments() {
        try (Stream<Path> entries = Files.list(Path.of("/dev/shm"))) {
            TreeSet<String> names = new TreeSet<>();
            entries.map(p -> p.getFileName().toString()).filter(n -> n.startsWith("jnccl-")).forEach(names::add);
            return names;
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static int countEntries(Path dir) {
        try (Stream<Path> entries = Files.list(dir)) {
            return (int) entries.count();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    // ------------------------------------------------------------------ ranks as threads

    interface RankBody<T> {
        T run(int rank) throws Exception;
    }

    /**
     * A world of ranks as platform threads sharing one by-value unique id. Bodies register their
     * communicators so that a failure or a timeout aborts every rank instead of hanging the suite.
     */
    static final class World {
        final int size;
        final MemorySegment id;
        final AtomicReferenceArray<MemorySegment> comms;

        World(int size) {
            this.size = size;
            this.id = newUniqueId(Arena.ofAuto());
            this.comms = new AtomicReferenceArray<>(size);
        }

        /** cudaSetDevice(rank) + ncclCommInitRank, registered for abort on failure. */
        MemorySegment init(int rank) {
            MemorySegment comm = initRank(id, size, rank, rank % deviceCount());
            comms.set(rank, comm);
            return comm;
        }

        /** Forgets a communicator that the body destroyed itself. */
        void forget(int rank) {
            comms.set(rank, null);
        }

        /** Runs body(rank) on size platform threads; all must finish within limit. */
        <T> List<T> run(Duration limit, RankBody<T> body) throws Exception {
            List<FutureTask<T>> tasks = new ArrayList<>();
            for (int r = 0; r < size; r++) {
                int rank = r;
                FutureTask<T> task = new FutureTask<>(() -> body.run(rank));
                tasks.add(task);
                Thread.ofPlatform().daemon().name("world" + size + "-rank" + rank).start(task);
            }
            long deadline = System.nanoTime() + limit.toNanos();
            List<T> results = new ArrayList<>();
            Throwable failure = null;
            for (int r = 0; r < size; r++) {
                try {
                    long left = Math.max(1, deadline - System.nanoTime());
                    results.add(tasks.get(r).get(left, TimeUnit.NANOSECONDS));
                } catch (TimeoutException e) {
                    failure = new AssertionError("rank " + r + " of world " + size + " did not finish within " + limit);
                    break;
                } catch (ExecutionException e) {
                    failure = e.getCause();
                    break;
                }
            }
            if (failure != null) {
                abortAll();
                // Give the aborted ranks a moment to leave so they do not disturb the next test.
                for (FutureTask<T> task : tasks) {
                    try {
                        task.get(5, TimeUnit.SECONDS);
                    } catch (Exception ignored) {
                        // already reported through failure
                    }
                }
                if (failure instanceof Exception e) {
                    throw e;
                }
                throw (Error) failure;
            }
            return results;
        }

        void abortAll() {
            for (int r = 0; r < size; r++) {
                MemorySegment comm = comms.getAndSet(r, null);
                if (comm != null) {
                    Nccl.ncclCommAbort(comm);
                }
            }
        }
    }

    // ------------------------------------------------------------------ element types

    enum Kind { SIGNED, UNSIGNED, F32, F64, LOW }

    /** ncclDataType_t, with raw-bit accessors: a value is carried as its bit pattern in a long. */
    enum DType {
        INT8(Nccl.ncclInt8(), 1, Kind.SIGNED),
        UINT8(Nccl.ncclUint8(), 1, Kind.UNSIGNED),
        INT32(Nccl.ncclInt32(), 4, Kind.SIGNED),
        UINT32(Nccl.ncclUint32(), 4, Kind.UNSIGNED),
        INT64(Nccl.ncclInt64(), 8, Kind.SIGNED),
        UINT64(Nccl.ncclUint64(), 8, Kind.UNSIGNED),
        FLOAT16(Nccl.ncclFloat16(), 2, Kind.LOW),
        FLOAT32(Nccl.ncclFloat32(), 4, Kind.F32),
        FLOAT64(Nccl.ncclFloat64(), 8, Kind.F64),
        BFLOAT16(Nccl.ncclBfloat16(), 2, Kind.LOW),
        FP8E4M3(Nccl.ncclFloat8e4m3(), 1, Kind.LOW),
        FP8E5M2(Nccl.ncclFloat8e5m2(), 1, Kind.LOW);

        final int id;
        final int size;
        final Kind kind;

        DType(int id, int size, Kind kind) {
            this.id = id;
            this.size = size;
            this.kind = kind;
        }

        boolean isFp8() {
            return this == FP8E4M3 || this == FP8E5M2;
        }

        boolean isFloat() {
            return kind == Kind.F32 || kind == Kind.F64 || kind == Kind.LOW;
        }

        /** Raw bits of element index (sign-extended to long). */
        long get(MemorySegment segment, long index) {
            long offset = index * size;
            return switch (size) {
                case 1 -> segment.get(JAVA_BYTE, offset);
                case 2 -> segment.get(JAVA_SHORT_UNALIGNED, offset);
                case 4 -> segment.get(JAVA_INT_UNALIGNED, offset);
                default -> segment.get(JAVA_LONG_UNALIGNED, offset);
            };
        }

        void set(MemorySegment segment, long index, long bits) {
            long offset = index * size;
            switch (size) {
                case 1 -> segment.set(JAVA_BYTE, offset, (byte) bits);
                case 2 -> segment.set(JAVA_SHORT_UNALIGNED, offset, (short) bits);
                case 4 -> segment.set(JAVA_INT_UNALIGNED, offset, (int) bits);
                default -> segment.set(JAVA_LONG_UNALIGNED, offset, bits);
            }
        }

        /** An integer value as a long: sign-extended or zero-extended from the type's width. */
        long normalize(long bits) {
            if (size == 8) {
                return bits;
            }
            int shift = 64 - 8 * size;
            return kind == Kind.SIGNED ? (bits << shift) >> shift : (bits << shift) >>> shift;
        }

        /** Low-precision and F32 bits to float. */
        float toFloat(long bits) {
            return switch (this) {
                case FLOAT16 -> LowPrecision.halfToFloat((short) bits);
                case BFLOAT16 -> LowPrecision.bf16ToFloat((short) bits);
                case FP8E4M3 -> LowPrecision.e4m3ToFloat((byte) bits);
                case FP8E5M2 -> LowPrecision.e5m2ToFloat((byte) bits);
                case FLOAT32 -> Float.intBitsToFloat((int) bits);
                default -> throw new IllegalStateException(name());
            };
        }

        /** Float to this low-precision type (round to nearest even once; fp8 saturates). */
        long fromFloat(float value) {
            return switch (this) {
                case FLOAT16 -> LowPrecision.floatToHalf(value);
                case BFLOAT16 -> LowPrecision.floatToBf16(value);
                case FP8E4M3 -> LowPrecision.floatToE4m3(value);
                case FP8E5M2 -> LowPrecision.floatToE5m2(value);
                case FLOAT32 -> Float.floatToRawIntBits(value);
                default -> throw new IllegalStateException(name());
            };
        }

        double toDouble(long bits) {
            return switch (kind) {
                case F64 -> Double.longBitsToDouble(bits);
                case F32, LOW -> toFloat(bits);
                case SIGNED -> normalize(bits);
                case UNSIGNED -> size == 8 && bits < 0 ? (bits >>> 1) * 2.0 : normalize(bits);
            };
        }

        boolean isNaN(long bits) {
            return isFloat() && Double.isNaN(toDouble(bits));
        }

        /** Equal bit patterns, or both NaN (any NaN, except for bf16). */
        boolean same(long expected, long actual) {
            if (size < 8) {
                long mask = (1L << (8 * size)) - 1;
                expected &= mask;
                actual &= mask;
            }
            // bf16 NaN is bit-exact: the emulation, like CUDA's __float2bfloat16_rn, gives the
            // canonical 0x7FFF, and so does the reference (LowPrecision.floatToBf16).
            return expected == actual || (this != BFLOAT16 && isNaN(expected) && isNaN(actual));
        }

        String show(long bits) {
            return switch (kind) {
                case SIGNED -> Long.toString(normalize(bits));
                case UNSIGNED -> Long.toUnsignedString(normalize(bits));
                case F64 -> Double.longBitsToDouble(bits) + " [0x" + Long.toHexString(bits) + "]";
                case F32, LOW -> toFloat(bits) + " [0x" + Long.toHexString(bits & ((1L << (8 * size)) - 1)) + "]";
            };
        }

        /**
         * A random non-zero value. Integers use the whole range (sums and products wrap); floating
         * values have magnitudes in [1/4, 4) with a random sign, so products of 8 ranks stay finite in
         * float while still reaching the fp16 / fp8 limits (inf, saturation), which the reference models.
         */
        long random(Random random) {
            while (true) {
                long bits;
                if (kind == Kind.SIGNED || kind == Kind.UNSIGNED) {
                    bits = random.nextLong();
                    if (normalize(bits) == 0) {
                        continue;
                    }
                    return bits;
                }
                // 2^e * [1, 2) for e in -2..1: a random exponent and a random full mantissa.
                double magnitude = Math.scalb(1.0 + random.nextDouble(), random.nextInt(4) - 2);
                double value = random.nextBoolean() ? -magnitude : magnitude;
                bits = switch (kind) {
                    case F64 -> Double.doubleToRawLongBits(value);
                    default -> fromFloat((float) value);
                };
                if (toDouble(bits) == 0) {
                    continue;
                }
                return bits;
            }
        }
    }

    /** ncclRedOp_t. */
    enum Op {
        SUM(Nccl.ncclSum()), PROD(Nccl.ncclProd()), MAX(Nccl.ncclMax()), MIN(Nccl.ncclMin()), AVG(Nccl.ncclAvg());

        final int id;

        Op(int id) {
            this.id = id;
        }
    }

    /** {@link #reduce(DType, Op, long[], int, int)} starting the ring at rank 0. */
    static long reduce(DType type, Op op, long[] values, int n) {
        return reduce(type, op, values, n, 0);
    }

    /**
     * NCCL's arithmetic, which the emulation follows (checked against NCCL 2.30.7 on an H200, see
     * bindings/src/test/c/reduction_dump.c): values combined in ring order {@code first, first + 1,
     * ...} (mod n); integers wrap in the type's width, avg = wrapped sum / n (truncating); floating
     * types round every step in the type (low precision to nearest even, fp8 saturating, infinity
     * included); float avg: s = 1/n rounded to the type, the first contribution x * s rounded, then a
     * fused multiply-add per step (fp8: x * s rounded, then added); float max / min ignore a NaN
     * operand (fmaxf).
     */
    static long reduce(DType type, Op op, long[] values, int n, int first) {
        switch (type.kind) {
            case SIGNED, UNSIGNED -> {
                long acc = type.normalize(values[0]);
                for (int r = 1; r < n; r++) {
                    long v = type.normalize(values[r]);
                    acc = switch (op) {
                        case SUM, AVG -> acc + v;
                        case PROD -> acc * v;
                        case MAX -> compare(type, v, acc) > 0 ? v : acc;
                        case MIN -> compare(type, v, acc) < 0 ? v : acc;
                    };
                    acc = type.normalize(acc);
                }
                if (op == Op.AVG) {
                    acc = type.kind == Kind.UNSIGNED && type.size == 8 ? Long.divideUnsigned(acc, n) : acc / n;
                    acc = type.normalize(acc);
                }
                return acc;
            }
            case F64 -> {
                double scale = 1.0 / n;
                double acc = 0;
                for (int k = 0; k < n; k++) {
                    double v = Double.longBitsToDouble(values[(first + k) % n]);
                    if (k == 0) {
                        acc = op == Op.AVG ? v * scale : v;
                    } else {
                        acc = op == Op.AVG ? Math.fma(v, scale, acc) : combine(op, acc, v);
                    }
                }
                return Double.doubleToRawLongBits(acc);
            }
            default -> {
                boolean fp8 = type.size == 1;
                float scale = round(type, 1.0f / n);
                float acc = 0;
                for (int k = 0; k < n; k++) {
                    float v = type.toFloat(values[(first + k) % n]);
                    if (k == 0) {
                        acc = op == Op.AVG ? round(type, v * scale) : v;
                    } else if (op == Op.AVG) {
                        acc = round(type, fp8 ? acc + round(type, v * scale) : Math.fma(v, scale, acc));
                    } else {
                        acc = round(type, combine(op, acc, v));
                    }
                }
                return type.fromFloat(acc);
            }
        }
    }

    /** {@code value} rounded to {@code type} (a float type) and back. */
    private static float round(DType type, float value) {
        return type.toFloat(type.fromFloat(value));
    }

    private static int compare(DType type, long a, long b) {
        return type.kind == Kind.UNSIGNED && type.size == 8 ? Long.compareUnsigned(a, b) : Long.compare(a, b);
    }

    private static double combine(Op op, double acc, double v) {
        return switch (op) {
            case SUM, AVG -> acc + v;
            case PROD -> acc * v;
            // fmax / fmin: a NaN operand loses; on a tie (+0 / -0) the later contribution wins.
            case MAX -> Double.isNaN(acc) ? v : Double.isNaN(v) ? acc : acc > v ? acc : v;
            case MIN -> Double.isNaN(acc) ? v : Double.isNaN(v) ? acc : acc < v ? acc : v;
        };
    }

    private static float combine(Op op, float acc, float v) {
        return switch (op) {
            case SUM, AVG -> acc + v;
            case PROD -> acc * v;
            case MAX -> Float.isNaN(acc) ? v : Float.isNaN(v) ? acc : acc > v ? acc : v;
            case MIN -> Float.isNaN(acc) ? v : Float.isNaN(v) ? acc : acc < v ? acc : v;
        };
    }
}
