package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.JncclRuntime;
import dev.jnccl.ReduceOp;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.testsupport.LowPrecision;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.function.DoubleUnaryOperator;

/**
 * The out-of-place forms of all-reduce, reduce-scatter and broadcast, reduce, gather, scatter and
 * the uneven all-to-all, as rank bodies shared by threads mode ({@link ThreadsCollectiveSurfaceTest})
 * and MPI mode ({@link MpiRank}): every dtype family (INT32; FP32 and FP64; FP16 and BF16 with
 * every step rounded as NCCL does), in and out of place, non-roots passing no buffer. Random data
 * from per-rank seeds, compared element by element with a Java reference (bit for bit on the host
 * emulation, within the rounding of the ring's order on a GPU; data movement always bit for bit).
 */
final class CollectiveScenarios {
    /** Elements per rank (odd, small: the matrices run on a 2-core CI). */
    static final int COUNT = 77;

    private CollectiveScenarios() {}

    /**
     * Out-of-place all-reduce, reduce-scatter and broadcast of every family; each in a
     * transaction, then again with the same tensor as source and destination (in place), and by
     * the convenience form.
     */
    static void outOfPlaceReductions(RankContext c) {
        int n = c.world;
        // INT32: all-reduce SUM (wraps exactly), reduce-scatter MIN, broadcast from the last rank
        List<int[]> ints = c.int32All("oop.i32", COUNT * n);
        DeviceTensor intSrc = c.upload(ints.get(c.rank));
        DeviceTensor intSum = c.upload(Data.int32(c.seed(c.rank, "oop.i32.sentinel"), COUNT * n));
        DeviceTensor intMin = c.upload(Data.int32(c.seed(c.rank, "oop.i32.min.sentinel"), COUNT));
        DeviceTensor intCast = c.upload(Data.int32(c.seed(c.rank, "oop.i32.cast.sentinel"), COUNT * n));
        CudaEvent signal = c.event();
        try (Transaction tx = c.comm.begin(c.compute())) {
            tx.allReduce(intSrc, intSum, ReduceOp.SUM).reduceScatter(intSrc, intMin, ReduceOp.MIN)
                    .broadcast(intSrc, intCast, n - 1);
            tx.execute(signal);
        }
        c.comm.await(signal);
        Verify.ints(c.what("allReduce INT32 SUM out of place"), Data.reduceInt(ints, ReduceOp.SUM, 0, COUNT * n),
                c.ints(intSum));
        Verify.ints(c.what("reduceScatter INT32 MIN out of place"),
                Data.reduceInt(ints, ReduceOp.MIN, c.rank * COUNT, COUNT), c.ints(intMin));
        Verify.ints(c.what("broadcast INT32 out of place from rank " + (n - 1)), ints.get(n - 1), c.ints(intCast));
        Verify.ints(c.what("out-of-place sources unchanged"), ints.get(c.rank), c.ints(intSrc));

        // FP32: the same three by the convenience forms, then in place through the out-of-place API
        List<float[]> floats = c.fp32All("oop.f32", COUNT * n);
        DeviceTensor src = c.upload(floats.get(c.rank));
        DeviceTensor sum = c.alloc(DType.FP32, (long) COUNT * n);
        DeviceTensor shard = c.alloc(DType.FP32, COUNT);
        DeviceTensor cast = c.alloc(DType.FP32, (long) COUNT * n);
        c.comm.allReduce(src, sum, ReduceOp.SUM, c.compute());
        c.comm.reduceScatter(src, shard, ReduceOp.SUM, c.compute());
        c.comm.broadcast(src, cast, 0, c.compute());
        c.compute().synchronize();
        Verify.floats(c.what("convenience allReduce FP32 SUM out of place"),
                Data.reduce(floats, ReduceOp.SUM, 0, COUNT * n, Data.Ring.allReduce(COUNT * n, n, 4)), c.floats(sum),
                c.exact, Data.magnitude(floats, 0, COUNT * n));
        Verify.floats(c.what("convenience reduceScatter FP32 SUM out of place"),
                Data.reduce(floats, ReduceOp.SUM, c.rank * COUNT, COUNT, Data.Ring.reduceScatter(c.rank, n)),
                c.floats(shard), c.exact, Data.magnitude(floats, c.rank * COUNT, COUNT));
        Verify.floats(c.what("convenience broadcast FP32 out of place from rank 0"), floats.get(0), c.floats(cast));
        Verify.floats(c.what("convenience out-of-place source unchanged"), floats.get(c.rank), c.floats(src));
        // in place: the same tensor, and the reduce-scatter's shard of its source
        DeviceTensor again = c.upload(floats.get(c.rank));
        DeviceTensor scattered = c.upload(floats.get(c.rank));
        CudaEvent inPlace = c.event();
        try (Transaction tx = c.comm.begin(c.compute())) {
            tx.allReduce(again, again, ReduceOp.MAX).reduceScatter(scattered, scattered.shard(c.rank, n), ReduceOp.SUM);
            tx.execute(inPlace);
        }
        c.comm.await(inPlace);
        Verify.floats(c.what("allReduce FP32 MAX, src == dst"),
                Data.reduce(floats, ReduceOp.MAX, 0, COUNT * n, Data.Ring.allReduce(COUNT * n, n, 4)), c.floats(again));
        Verify.floats(c.what("reduceScatter FP32 SUM, dst the shard of src"),
                Data.reduce(floats, ReduceOp.SUM, c.rank * COUNT, COUNT, Data.Ring.reduceScatter(c.rank, n)),
                Data.slice(c.floats(scattered), c.rank * COUNT, COUNT), c.exact,
                Data.magnitude(floats, c.rank * COUNT, COUNT));

        // BF16 all-reduce and FP16 reduce-scatter, out of place, every step rounded to the type
        List<short[]> bf16 = c.bf16All("oop.bf16", COUNT * n);
        DeviceTensor bfSrc = c.upload(bf16.get(c.rank));
        DeviceTensor bfDst = c.alloc(DType.BF16, (long) COUNT * n);
        List<double[]> halves = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            // multiples of 1/256 in [-4, 4): exact in FP16, and their sums exact in float before rounding
            halves.add(values(c.seed(r, "oop.f16"), COUNT * n, x -> half(Math.rint(x * 256) / 256)));
        }
        DeviceTensor halfSrc = c.upload(DType.FP16, encode(DType.FP16, halves.get(c.rank)));
        DeviceTensor halfDst = c.alloc(DType.FP16, COUNT);
        // FP64 all-reduce
        List<double[]> doubles = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            doubles.add(values(c.seed(r, "oop.f64"), COUNT * n, x -> x));
        }
        DeviceTensor dSrc = c.upload(DType.FP64, encode(DType.FP64, doubles.get(c.rank)));
        DeviceTensor dDst = c.alloc(DType.FP64, (long) COUNT * n);
        CudaEvent low = c.event();
        try (Transaction tx = c.comm.begin(c.compute())) {
            tx.allReduce(bfSrc, bfDst, ReduceOp.SUM).reduceScatter(halfSrc, halfDst, ReduceOp.SUM)
                    .allReduce(dSrc, dDst, ReduceOp.SUM);
            tx.execute(low);
        }
        c.comm.await(low);
        Verify.bf16(c.what("allReduce BF16 SUM out of place"),
                Data.reduceBf16(bf16, ReduceOp.SUM, 0, COUNT * n, Data.Ring.allReduce(COUNT * n, n, 2)), c.bf16(bfDst),
                c.exact, Data.magnitudeBf16(bf16, 0, COUNT * n));
        checkDoubles(c, "reduceScatter FP16 SUM out of place",
                ringSum(halves, c.rank * COUNT, COUNT, i -> (c.rank + 1) % n, CollectiveScenarios::half),
                decode(DType.FP16, c.raw(halfDst)), 1e-3);
        checkDoubles(c, "allReduce FP64 SUM out of place",
                ringSum(doubles, 0, COUNT * n, ring(Data.Ring.allReduce(COUNT * n, n, 8)), x -> x),
                decode(DType.FP64, c.raw(dDst)), 1e-12);
        c.comm.barrier();
    }

    /**
     * Reduce to every root: INT32 PROD (wraps exactly) with no {@code dst} on the non-roots, FP32
     * SUM in place on the root, FP64 and BF16 SUM by the convenience form.
     */
    static void reduceToEveryRoot(RankContext c) {
        int n = c.world;
        for (int root = 0; root < n; root++) {
            boolean isRoot = c.rank == root;
            String tag = "reduce." + root;
            List<int[]> ints = c.int32All(tag + ".i32", COUNT);
            List<float[]> floats = c.fp32All(tag + ".f32", COUNT);
            List<short[]> bf16 = c.bf16All(tag + ".bf16", COUNT);
            List<double[]> doubles = new ArrayList<>();
            for (int r = 0; r < n; r++) {
                doubles.add(values(c.seed(r, tag + ".f64"), COUNT, x -> x));
            }
            DeviceTensor intSrc = c.upload(ints.get(c.rank));
            DeviceTensor intDst = isRoot ? c.alloc(DType.INT32, COUNT) : null;
            DeviceTensor floatBoth = c.upload(floats.get(c.rank));
            CudaEvent signal = c.event();
            try (Transaction tx = c.comm.begin(c.compute())) {
                tx.reduce(intSrc, intDst, ReduceOp.PROD, root).reduce(floatBoth, floatBoth, ReduceOp.SUM, root);
                tx.execute(signal);
            }
            c.comm.await(signal);
            DeviceTensor bfSrc = c.upload(bf16.get(c.rank));
            DeviceTensor bfDst = c.alloc(DType.BF16, COUNT);
            DeviceTensor dSrc = c.upload(DType.FP64, encode(DType.FP64, doubles.get(c.rank)));
            DeviceTensor dDst = isRoot ? c.alloc(DType.FP64, COUNT) : null;
            c.comm.reduce(bfSrc, bfDst, ReduceOp.SUM, root, c.compute());
            c.comm.reduce(dSrc, dDst, ReduceOp.SUM, root, c.compute());
            c.compute().synchronize();
            int first = (root + 1) % n;
            Data.Ring ring = i -> first; // NCCL's ring reduce ends at the root
            if (isRoot) {
                Verify.ints(c.what("reduce INT32 PROD to root " + root), Data.reduceInt(ints, ReduceOp.PROD, 0, COUNT),
                        c.ints(intDst));
                Verify.floats(c.what("reduce FP32 SUM in place to root " + root),
                        Data.reduce(floats, ReduceOp.SUM, 0, COUNT, ring), c.floats(floatBoth), c.exact,
                        Data.magnitude(floats, 0, COUNT));
                Verify.bf16(c.what("convenience reduce BF16 SUM to root " + root),
                        Data.reduceBf16(bf16, ReduceOp.SUM, 0, COUNT, ring), c.bf16(bfDst), c.exact,
                        Data.magnitudeBf16(bf16, 0, COUNT));
                checkDoubles(c, "convenience reduce FP64 SUM to root " + root,
                        ringSum(doubles, 0, COUNT, ring(ring), x -> x), decode(DType.FP64, c.raw(dDst)), 1e-12);
            } else {
                // a non-root's buffers are not written: its in-place source is its own data still
                Verify.floats(c.what("reduce on a non-root leaves its buffer"), floats.get(c.rank), c.floats(floatBoth));
            }
        }
        c.comm.barrier();
    }

    /**
     * Gather and scatter of every dtype (they only move bytes) from and to a root that moves with
     * the dtype: out of place with no buffer on the non-roots, then in place on the root, each in
     * a transaction between a ring send and its receive (their messages must never pair), then by
     * the convenience forms.
     */
    static void gatherAndScatterOfEveryDtype(RankContext c) {
        int n = c.world;
        int next = (c.rank + 1) % n;
        int prev = (c.rank + n - 1) % n;
        int index = 0;
        for (DType dtype : DType.values()) {
            if (!JncclRuntime.query().supports(dtype)) {
                continue;
            }
            int root = index++ % n;
            boolean isRoot = c.rank == root;
            int slot = COUNT * dtype.size();
            String tag = "gs." + dtype;
            byte[] mine = Data.bytes(c.seed(c.rank, tag), slot);
            byte[] rootAll = Data.bytes(c.seed(root, tag + ".all"), slot * n);
            DeviceTensor src = c.upload(dtype, mine);
            DeviceTensor gathered = isRoot ? c.upload(dtype, Data.bytes(c.seed(c.rank, tag + ".s"), slot * n)) : null;
            DeviceTensor all = isRoot ? c.upload(dtype, rootAll) : null;
            DeviceTensor piece = c.upload(dtype, Data.bytes(c.seed(c.rank, tag + ".p"), slot));
            DeviceTensor ring = c.upload(DType.INT32, Data.bytes(c.seed(c.rank, tag + ".ring"), 64));
            DeviceTensor ringIn = c.alloc(DType.INT32, 16);
            CudaEvent signal = c.event();
            try (Transaction tx = c.comm.begin(c.compute())) {
                tx.send(ring, next).gather(src, gathered, root).scatter(all, piece, root).recv(ringIn, prev);
                tx.execute(signal);
            }
            c.comm.await(signal);
            byte[] expectedGather = new byte[slot * n];
            for (int from = 0; from < n; from++) {
                System.arraycopy(Data.bytes(c.seed(from, tag), slot), 0, expectedGather, from * slot, slot);
            }
            if (isRoot) {
                assertArrayEquals(expectedGather, c.raw(gathered), c.what("gather " + dtype + " to root " + root));
            }
            byte[] expectedPiece = Arrays.copyOfRange(rootAll, c.rank * slot, (c.rank + 1) * slot);
            assertArrayEquals(expectedPiece, c.raw(piece), c.what("scatter " + dtype + " from root " + root));
            assertArrayEquals(Data.bytes(c.seed(prev, tag + ".ring"), 64), c.raw(ringIn),
                    c.what("ring message next to gather/scatter " + dtype));

            // in place on the root (its slot of the whole), by the convenience forms
            DeviceTensor whole = isRoot ? c.upload(dtype, rootAll) : null;
            DeviceTensor gatherSrc = isRoot ? whole.shard(root, n) : c.upload(dtype, mine);
            // the root's own contribution is its slot of the whole already
            c.comm.gather(gatherSrc, whole, root, c.compute());
            DeviceTensor scatterAll = isRoot ? c.upload(dtype, rootAll) : null;
            DeviceTensor scatterDst = isRoot ? scatterAll.shard(root, n) : c.alloc(dtype, COUNT);
            c.comm.scatter(scatterAll, scatterDst, root, c.compute());
            c.compute().synchronize();
            if (isRoot) {
                byte[] expected = expectedGather.clone();
                System.arraycopy(Arrays.copyOfRange(rootAll, root * slot, (root + 1) * slot), 0, expected, root * slot,
                        slot);
                assertArrayEquals(expected, c.raw(whole), c.what("convenience gather " + dtype + " in place at root "
                        + root));
                assertArrayEquals(rootAll, c.raw(scatterAll), c.what("convenience scatter " + dtype
                        + " in place at root " + root + ": the whole unchanged"));
            } else {
                assertArrayEquals(expectedPiece, c.raw(scatterDst), c.what("convenience scatter " + dtype
                        + " from root " + root));
            }
        }
        c.comm.barrier();
    }

    /**
     * The uneven all-to-all of every dtype: rank {@code p} sends {@code (3p + 5q + k) mod 7}
     * elements to rank {@code q} (zeros included), in a transaction between a ring send and its
     * receive, then by the convenience form; the rest of {@code recv} stays untouched.
     */
    static void unevenAllToAllOfEveryDtype(RankContext c) {
        int n = c.world;
        int next = (c.rank + 1) % n;
        int prev = (c.rank + n - 1) % n;
        int k = 0;
        for (DType dtype : DType.values()) {
            if (!JncclRuntime.query().supports(dtype)) {
                continue;
            }
            int salt = k++;
            int es = dtype.size();
            int capacity = 7 * n + 3; // room past the blocks: must stay untouched
            String tag = "a2av." + dtype;
            long[] sendCounts = new long[n];
            long[] recvCounts = new long[n];
            for (int q = 0; q < n; q++) {
                sendCounts[q] = count(c.rank, q, salt);
                recvCounts[q] = count(q, c.rank, salt);
            }
            DeviceTensor send = c.upload(dtype, Data.bytes(c.seed(c.rank, tag), capacity * es));
            byte[] sentinel = Data.bytes(c.seed(c.rank, tag + ".sentinel"), capacity * es);
            DeviceTensor recv = c.upload(dtype, sentinel);
            DeviceTensor recv2 = c.upload(dtype, sentinel);
            DeviceTensor ring = c.upload(DType.INT32, Data.bytes(c.seed(c.rank, tag + ".ring"), 64));
            DeviceTensor ringIn = c.alloc(DType.INT32, 16);
            CudaEvent signal = c.event();
            try (Transaction tx = c.comm.begin(c.compute())) {
                tx.send(ring, next).allToAll(send, sendCounts, recv, recvCounts).recv(ringIn, prev);
                tx.execute(signal);
            }
            c.comm.await(signal);
            c.comm.allToAll(send, sendCounts, recv2, recvCounts, c.compute());
            c.compute().synchronize();
            byte[] expected = sentinel.clone();
            int at = 0;
            for (int from = 0; from < n; from++) {
                int offset = 0;
                for (int q = 0; q < c.rank; q++) {
                    offset += count(from, q, salt);
                }
                int length = count(from, c.rank, salt);
                System.arraycopy(Data.bytes(c.seed(from, tag), capacity * es), offset * es, expected, at * es,
                        length * es);
                at += length;
            }
            assertArrayEquals(expected, c.raw(recv), c.what("uneven allToAll " + dtype + " in a transaction"));
            assertArrayEquals(expected, c.raw(recv2), c.what("convenience uneven allToAll " + dtype));
            assertArrayEquals(Data.bytes(c.seed(prev, tag + ".ring"), 64), c.raw(ringIn),
                    c.what("ring message next to the uneven allToAll " + dtype));
        }
        c.comm.barrier();
    }

    /**
     * The uneven all-gather of every dtype: rank {@code p} contributes {@code (3p + k) mod 7}
     * elements (zeros included), in a transaction between a ring send and its receive, by the
     * convenience form, and in place (each rank's block already in its full tensor); the rest of
     * {@code full} stays untouched.
     */
    static void unevenAllGatherOfEveryDtype(RankContext c) {
        int n = c.world;
        int next = (c.rank + 1) % n;
        int prev = (c.rank + n - 1) % n;
        int k = 0;
        for (DType dtype : DType.values()) {
            if (!JncclRuntime.query().supports(dtype)) {
                continue;
            }
            int salt = k++;
            int es = dtype.size();
            int capacity = 7 * n + 3; // room past the blocks: must stay untouched
            String tag = "agv." + dtype;
            long[] counts = new long[n];
            int before = 0;
            for (int p = 0; p < n; p++) {
                counts[p] = count(p, 0, salt);
                before += p < c.rank ? (int) counts[p] : 0;
            }
            int own = (int) counts[c.rank];
            DeviceTensor shard = c.upload(dtype, Data.bytes(c.seed(c.rank, tag), 7 * es)).slice(0, own);
            byte[] sentinel = Data.bytes(c.seed(c.rank, tag + ".sentinel"), capacity * es);
            DeviceTensor full = c.upload(dtype, sentinel);
            DeviceTensor full2 = c.upload(dtype, sentinel);
            byte[] inPlace = sentinel.clone();
            System.arraycopy(Data.bytes(c.seed(c.rank, tag), 7 * es), 0, inPlace, before * es, own * es);
            DeviceTensor full3 = c.upload(dtype, inPlace);
            DeviceTensor ring = c.upload(DType.INT32, Data.bytes(c.seed(c.rank, tag + ".ring"), 64));
            DeviceTensor ringIn = c.alloc(DType.INT32, 16);
            CudaEvent signal = c.event();
            try (Transaction tx = c.comm.begin(c.compute())) {
                tx.send(ring, next).allGather(shard, full, counts).recv(ringIn, prev);
                tx.execute(signal);
            }
            c.comm.await(signal);
            c.comm.allGather(shard, full2, counts, c.compute());
            c.comm.allGather(full3.slice(before, own), full3, counts, c.compute());
            c.compute().synchronize();
            byte[] expected = sentinel.clone();
            int at = 0;
            for (int from = 0; from < n; from++) {
                int length = (int) counts[from];
                System.arraycopy(Data.bytes(c.seed(from, tag), 7 * es), 0, expected, at * es, length * es);
                at += length;
            }
            assertArrayEquals(expected, c.raw(full), c.what("uneven allGather " + dtype + " in a transaction"));
            assertArrayEquals(expected, c.raw(full2), c.what("convenience uneven allGather " + dtype));
            assertArrayEquals(expected, c.raw(full3), c.what("in-place uneven allGather " + dtype));
            assertArrayEquals(Data.bytes(c.seed(prev, tag + ".ring"), 64), c.raw(ringIn),
                    c.what("ring message next to the uneven allGather " + dtype));
        }
        c.comm.barrier();
    }

    /** Elements rank {@code from} sends to rank {@code to}: 0 to 6, zeros included. */
    private static int count(int from, int to, int salt) {
        return (3 * from + 5 * to + salt) % 7;
    }

    // ------------------------------------------------------------------ FP16 / FP64 references

    /** Random values in [-4, 4) made representable by {@code round}. */
    private static double[] values(long seed, int count, DoubleUnaryOperator round) {
        SplittableRandom random = new SplittableRandom(seed);
        double[] out = new double[count];
        for (int i = 0; i < count; i++) {
            out[i] = round.applyAsDouble(random.nextDouble(-4, 4));
        }
        return out;
    }

    /** {@code x} rounded to FP16 (to nearest even). */
    private static double half(double x) {
        return LowPrecision.halfToFloat(LowPrecision.floatToHalf((float) x));
    }

    private static java.util.function.IntUnaryOperator ring(Data.Ring ring) {
        return ring::first;
    }

    /** A SUM in ring order from {@code first(i)}, every step rounded by {@code round}. */
    private static double[] ringSum(List<double[]> inputs, int from, int count,
                                    java.util.function.IntUnaryOperator first, DoubleUnaryOperator round) {
        int n = inputs.size();
        double[] out = new double[count];
        for (int i = 0; i < count; i++) {
            int start = first.applyAsInt(from + i);
            double acc = inputs.get(start)[from + i];
            for (int j = 1; j < n; j++) {
                acc = round.applyAsDouble(acc + inputs.get((start + j) % n)[from + i]);
            }
            out[i] = acc;
        }
        return out;
    }

    private static byte[] encode(DType dtype, double[] values) {
        ByteBuffer buffer = ByteBuffer.allocate(values.length * dtype.size()).order(ByteOrder.LITTLE_ENDIAN);
        for (double v : values) {
            if (dtype == DType.FP64) {
                buffer.putDouble(v);
            } else {
                buffer.putShort(LowPrecision.floatToHalf((float) v));
            }
        }
        return buffer.array();
    }

    private static double[] decode(DType dtype, byte[] raw) {
        ByteBuffer buffer = ByteBuffer.wrap(raw).order(ByteOrder.LITTLE_ENDIAN);
        double[] out = new double[raw.length / dtype.size()];
        for (int i = 0; i < out.length; i++) {
            out[i] = dtype == DType.FP64 ? buffer.getDouble() : LowPrecision.halfToFloat(buffer.getShort());
        }
        return out;
    }

    /** Bit for bit on the emulation; within {@code tolerance} of the contributions' scale on a GPU. */
    private static void checkDoubles(RankContext c, String what, double[] expected, double[] actual, double tolerance) {
        assertEquals(expected.length, actual.length, c.what(what + ": length"));
        double scale = 4.0 * c.world;
        for (int i = 0; i < expected.length; i++) {
            boolean ok = c.exact ? Double.doubleToLongBits(expected[i]) == Double.doubleToLongBits(actual[i])
                    : Math.abs(expected[i] - actual[i]) <= tolerance * scale;
            if (!ok) {
                throw new AssertionError(c.what(what + ": element " + i + " is " + actual[i] + ", expected "
                        + expected[i]));
            }
        }
    }
}
