package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.AllToAllSchedule;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import java.util.ArrayList;
import java.util.List;

/**
 * The scenarios of threads mode, each run by every rank of a pack with its {@link RankContext}:
 * every transaction command, every convenience operation, the host helpers, a mixed transaction,
 * a send-only transaction, and transactions overlapping "compute" on another stream. Shared by the
 * host-emulation matrix ({@link ThreadsCollectivesTest}) and the GPU test ({@link GpuThreadsWorldOneTest}).
 *
 * <p>Sizes are multiples of 840 (divisible by every world size 1..8) and small, so the whole
 * matrix stays quick on a 2-core CI machine where the emulation runs each stream on a host thread.
 */
final class Scenarios {
    /** Elements of reduced tensors (divisible by 1..8). */
    static final int N = 840 * 4;
    /** Elements of one rank's all-gather shard. */
    static final int SHARD = 840;
    /** Elements of one all-to-all slot. */
    static final int SLOT = 210;

    private Scenarios() {}

    // ================================================================== transaction commands

    /** Every transaction command, each checked element by element. */
    static void transactionCommands(RankContext c) {
        reduceScatters(c);
        allGathers(c);
        sendRecvRing(c); // at world 1 every message goes to the rank itself
        destructiveAllToAll(c);
        emptyTransaction(c);
    }

    /** One transaction with reduce-scatters of FP32 (SUM, MAX), BF16 (SUM, AVG) and INT32 (MIN). */
    static void reduceScatters(RankContext c) {
        int n = c.world;
        int shard = N / n;
        int from = c.rank * shard;
        List<float[]> f32 = c.fp32All("rs.f32", N);
        List<float[]> f32max = c.fp32All("rs.f32max", N);
        List<short[]> b16 = c.bf16All("rs.bf16", N);
        List<short[]> b16avg = c.bf16All("rs.bf16avg", N);
        List<int[]> i32 = c.int32All("rs.i32", N);
        DeviceTensor tf = c.upload(f32.get(c.rank));
        DeviceTensor tm = c.upload(f32max.get(c.rank));
        DeviceTensor tb = c.upload(b16.get(c.rank));
        DeviceTensor ta = c.upload(b16avg.get(c.rank));
        DeviceTensor ti = c.upload(i32.get(c.rank));
        CudaEvent ready = c.event();
        CudaEvent signal = c.event();
        c.compute().record(ready);
        try (Transaction tx = c.comm.begin(ready)) {
            tx.reduceScatter(tf).reduceScatter(tm, ReduceOp.MAX).reduceScatter(tb, ReduceOp.SUM)
                    .reduceScatter(ta, ReduceOp.AVG).reduceScatter(ti, ReduceOp.MIN);
            tx.execute(signal);
        }
        c.comm.await(signal);
        Verify.floats(c.what("transaction reduceScatter FP32 SUM"), Data.reduce(f32, ReduceOp.SUM, from, shard, Data.Ring.reduceScatter(c.rank, n)),
                c.floats(tf.shard(c.rank, n)), c.exact, Data.magnitude(f32, from, shard));
        Verify.floats(c.what("transaction reduceScatter FP32 MAX"), Data.reduce(f32max, ReduceOp.MAX, from, shard, Data.Ring.reduceScatter(c.rank, n)),
                c.floats(tm.shard(c.rank, n)), c.exact, null);
        Verify.bf16(c.what("transaction reduceScatter BF16 SUM"), Data.reduceBf16(b16, ReduceOp.SUM, from, shard, Data.Ring.reduceScatter(c.rank, n)),
                c.bf16(tb.shard(c.rank, n)), c.exact, Data.magnitudeBf16(b16, from, shard));
        Verify.bf16(c.what("transaction reduceScatter BF16 AVG"), Data.reduceBf16(b16avg, ReduceOp.AVG, from, shard, Data.Ring.reduceScatter(c.rank, n)),
                c.bf16(ta.shard(c.rank, n)), c.exact, Data.magnitudeBf16(b16avg, from, shard));
        Verify.ints(c.what("transaction reduceScatter INT32 MIN"), Data.reduceInt(i32, ReduceOp.MIN, from, shard),
                c.ints(ti.shard(c.rank, n)));
    }

    /** All-gathers out of place (FP32) and in place (BF16), in one transaction started after a stream. */
    static void allGathers(RankContext c) {
        int n = c.world;
        List<float[]> shards = c.fp32All("ag.f32", SHARD);
        List<short[]> inPlace = c.bf16All("ag.bf16", SHARD);
        DeviceTensor shard = c.upload(shards.get(c.rank));
        DeviceTensor full = c.upload(Data.fp32(c.seed(c.rank, "ag.f32.sentinel"), SHARD * n));
        // The in-place tensor: this rank's slice holds its shard, the other slices hold junk.
        short[] initial = Data.bf16(c.seed(c.rank, "ag.bf16.sentinel"), SHARD * n);
        System.arraycopy(inPlace.get(c.rank), 0, initial, c.rank * SHARD, SHARD);
        DeviceTensor fullInPlace = c.upload(initial);
        CudaEvent signal = c.event();
        try (Transaction tx = c.comm.begin(c.compute())) {
            tx.allGather(shard, full);
            tx.allGather(fullInPlace.shard(c.rank, n), fullInPlace);
            tx.execute(signal);
        }
        c.comm.await(signal);
        float[] gotFull = c.floats(full);
        short[] gotInPlace = c.bf16(fullInPlace);
        for (int r = 0; r < n; r++) {
            Verify.floats(c.what("transaction allGather out of place, slice of rank " + r), shards.get(r),
                    Data.slice(gotFull, r * SHARD, SHARD));
            Verify.bf16(c.what("transaction allGather in place, slice of rank " + r), inPlace.get(r),
                    Data.slice(gotInPlace, r * SHARD, SHARD));
        }
        Verify.floats(c.what("allGather shard unchanged"), shards.get(c.rank), c.floats(shard));
    }

    /** Elements of the ring's messages sent by {@code sender}: two forward, one backward (sizes differ by sender). */
    private static int forward2(int sender) {
        return 400 + 8 * sender;
    }

    private static int backward(int sender) {
        return 300 + 4 * sender;
    }

    /**
     * Send/recv ring: two messages to the next rank, one to the previous rank (for world 2 the same
     * peer: then three messages per pair, matched by order).
     */
    static void sendRecvRing(RankContext c) {
        int n = c.world;
        int next = (c.rank + 1) % n;
        int prev = (c.rank + n - 1) % n;
        DeviceTensor f1 = c.upload(Data.fp32(c.seed(c.rank, "ring.f1"), SHARD));
        DeviceTensor f2 = c.upload(Data.int32(c.seed(c.rank, "ring.f2"), forward2(c.rank)));
        DeviceTensor b = c.upload(Data.bf16(c.seed(c.rank, "ring.b"), backward(c.rank)));
        DeviceTensor r1 = c.upload(Data.fp32(c.seed(c.rank, "ring.r1.sentinel"), SHARD));
        DeviceTensor r2 = c.upload(Data.int32(c.seed(c.rank, "ring.r2.sentinel"), forward2(prev)));
        DeviceTensor rb = c.upload(Data.bf16(c.seed(c.rank, "ring.rb.sentinel"), backward(next)));
        CudaEvent signal = c.event();
        try (Transaction tx = c.comm.begin(c.compute())) {
            tx.send(f1, next).send(f2, next).recv(r1, prev).recv(r2, prev).send(b, prev).recv(rb, next);
            tx.execute(signal);
        }
        c.comm.await(signal);
        Verify.floats(c.what("ring message 1 from rank " + prev), Data.fp32(c.seed(prev, "ring.f1"), SHARD), c.floats(r1));
        Verify.ints(c.what("ring message 2 from rank " + prev), Data.int32(c.seed(prev, "ring.f2"), forward2(prev)),
                c.ints(r2));
        Verify.bf16(c.what("ring backward message from rank " + next), Data.bf16(c.seed(next, "ring.b"), backward(next)),
                c.bf16(rb));
        Verify.floats(c.what("sent buffer unchanged"), Data.fp32(c.seed(c.rank, "ring.f1"), SHARD), c.floats(f1));
    }

    /** The destructive all-to-all, checked against {@link AllToAllSchedule}'s documented layout. */
    static void destructiveAllToAll(RankContext c) {
        int n = c.world;
        List<float[]> before = c.fp32All("a2a", n * SLOT);
        DeviceTensor tensor = c.upload(before.get(c.rank));
        CudaEvent signal = c.event();
        try (Transaction tx = c.comm.begin(c.compute())) {
            tx.destructiveAllToAll(tensor);
            tx.execute(signal);
        }
        c.comm.await(signal);
        checkAllToAll(c, before, c.floats(tensor), "transaction destructiveAllToAll");
    }

    /** Slot s holds rank sourceOfSlot(s)'s shard for this rank; the stale slot still holds this rank's own slot s. */
    static void checkAllToAll(RankContext c, List<float[]> before, float[] after, String what) {
        int n = c.world;
        int stale = AllToAllSchedule.staleSlot(c.rank, n);
        int staleSeen = 0;
        for (int slot = 0; slot < n; slot++) {
            int source = AllToAllSchedule.sourceOfSlot(c.rank, n, slot);
            float[] expected;
            String from;
            if (source < 0) {
                staleSeen++;
                assertEquals(stale, slot, c.what(what + ": sourceOfSlot -1 but staleSlot " + stale));
                expected = Data.slice(before.get(c.rank), slot * SLOT, SLOT);
                from = "stale slot (own data)";
            } else {
                expected = Data.slice(before.get(source), c.rank * SLOT, SLOT);
                from = "rank " + source + "'s shard for rank " + c.rank;
            }
            Verify.floats(c.what(what + ": slot " + slot + " = " + from), expected, Data.slice(after, slot * SLOT, SLOT));
        }
        assertEquals(n == 1 ? 0 : 1, staleSeen, c.what(what + ": number of stale slots"));
    }

    /** An empty transaction still records its signal (after the ready event). */
    static void emptyTransaction(RankContext c) {
        CudaEvent signal = c.event();
        try (Transaction tx = c.comm.begin(c.compute())) {
            tx.execute(signal);
        }
        c.comm.await(signal);
        assertTrue(signal.isComplete(), c.what("empty transaction's signal"));
    }

    // ================================================================== convenience operations

    static void convenienceOperations(RankContext c) {
        int n = c.world;
        int shard = N / n;
        int from = c.rank * shard;
        CudaStream compute = c.compute();
        for (ReduceOp op : ReduceOp.values()) {
            List<float[]> in = c.fp32All("allReduce." + op, N);
            DeviceTensor t = c.upload(in.get(c.rank));
            c.comm.allReduce(t, op, compute);
            compute.synchronize();
            Verify.floats(c.what("allReduce FP32 " + op), Data.reduce(in, op, 0, N, Data.Ring.allReduce(N, n, 4)), c.floats(t), c.exact,
                    op == ReduceOp.SUM || op == ReduceOp.AVG ? Data.magnitude(in, 0, N) : null);
        }
        {
            List<int[]> in = c.int32All("allReduce.i32", N);
            DeviceTensor t = c.upload(in.get(c.rank));
            c.comm.allReduce(t, ReduceOp.SUM, compute);
            compute.synchronize();
            Verify.ints(c.what("allReduce INT32 SUM"), Data.reduceInt(in, ReduceOp.SUM, 0, N), c.ints(t));
        }
        {
            List<short[]> in = c.bf16All("reduceMean.bf16", N);
            DeviceTensor t = c.upload(in.get(c.rank));
            c.comm.reduceMean(t, compute);
            compute.synchronize();
            Verify.bf16(c.what("reduceMean BF16"), Data.reduceBf16(in, ReduceOp.AVG, 0, N, Data.Ring.allReduce(N, n, 2)), c.bf16(t), c.exact,
                    Data.magnitudeBf16(in, 0, N));
        }
        {
            List<float[]> in = c.fp32All("reduceMean", N);
            DeviceTensor t = c.upload(in.get(c.rank));
            c.comm.reduceMean(t, compute);
            compute.synchronize();
            Verify.floats(c.what("reduceMean FP32"), Data.reduce(in, ReduceOp.AVG, 0, N, Data.Ring.allReduce(N, n, 4)), c.floats(t), c.exact,
                    Data.magnitude(in, 0, N));
        }
        {
            List<float[]> in = c.fp32All("reduceMax", N);
            DeviceTensor t = c.upload(in.get(c.rank));
            c.comm.reduceMax(t, compute);
            compute.synchronize();
            Verify.floats(c.what("reduceMax FP32"), Data.reduce(in, ReduceOp.MAX, 0, N, Data.Ring.allReduce(N, c.world, 4)), c.floats(t));
        }
        {
            // A local squared norm per rank, summed over ranks in rank order.
            List<float[]> locals = new ArrayList<>();
            for (int r = 0; r < n; r++) {
                float[] x = Data.fp32(c.seed(r, "norm"), 256);
                float sq = 0;
                for (float v : x) {
                    sq += v * v;
                }
                locals.add(new float[] {sq});
            }
            DeviceTensor t = c.upload(locals.get(c.rank));
            c.comm.reduceNormSquared(t, compute);
            compute.synchronize();
            Verify.floats(c.what("reduceNormSquared"), Data.reduce(locals, ReduceOp.SUM, 0, 1, Data.Ring.allReduce(1, c.world, 4)), c.floats(t), c.exact,
                    Data.magnitude(locals, 0, 1));
        }
        {
            List<float[]> in = c.fp32All("reduceScatter.single", N);
            DeviceTensor t = c.upload(in.get(c.rank));
            c.comm.reduceScatter(t, compute);
            compute.synchronize();
            Verify.floats(c.what("reduceScatter(tensor, stream)"), Data.reduce(in, ReduceOp.SUM, from, shard, Data.Ring.reduceScatter(c.rank, c.world)),
                    c.floats(t.shard(c.rank, n)), c.exact, Data.magnitude(in, from, shard));
        }
        {
            int countA = 840 * 2;
            int countB = 840 * 3;
            List<float[]> a = c.fp32All("reduceScatter.list.a", countA);
            List<short[]> b = c.bf16All("reduceScatter.list.b", countB);
            DeviceTensor ta = c.upload(a.get(c.rank));
            DeviceTensor tb = c.upload(b.get(c.rank));
            c.comm.reduceScatter(List.of(ta, tb), compute);
            compute.synchronize();
            int sa = countA / n;
            int sb = countB / n;
            Verify.floats(c.what("reduceScatter(list) FP32 tensor"), Data.reduce(a, ReduceOp.SUM, c.rank * sa, sa, Data.Ring.reduceScatter(c.rank, c.world)),
                    c.floats(ta.shard(c.rank, n)), c.exact, Data.magnitude(a, c.rank * sa, sa));
            Verify.bf16(c.what("reduceScatter(list) BF16 tensor"), Data.reduceBf16(b, ReduceOp.SUM, c.rank * sb, sb, Data.Ring.reduceScatter(c.rank, c.world)),
                    c.bf16(tb.shard(c.rank, n)), c.exact, Data.magnitudeBf16(b, c.rank * sb, sb));
        }
        waitOnComms(c);
    }

    /**
     * waitOnComms: a transaction without a signal, then the compute stream waits for the comms
     * stream and copies the result; the host only synchronizes the compute stream.
     */
    static void waitOnComms(RankContext c) {
        int n = c.world;
        int shard = N / n;
        int from = c.rank * shard;
        CudaStream compute = c.compute();
        List<float[]> in = c.fp32All("waitOnComms", N);
        DeviceTensor t = c.upload(in.get(c.rank));
        DeviceTensor out = c.upload(Data.fp32(c.seed(c.rank, "waitOnComms.sentinel"), shard));
        try (Transaction tx = c.comm.begin(compute)) {
            tx.reduceScatter(t);
            tx.execute(null);
        }
        c.comm.waitOnComms(compute);
        compute.copyAsync(t.shard(c.rank, n), out);
        compute.synchronize();
        Verify.floats(c.what("waitOnComms: copy made on the compute stream"), Data.reduce(in, ReduceOp.SUM, from, shard, Data.Ring.reduceScatter(c.rank, c.world)),
                c.floats(out), c.exact, Data.magnitude(in, from, shard));
    }

    // ================================================================== every data type

    /**
     * Every {@link dev.jnccl.DType} (each family: 64/32/16/8-bit floats, signed and unsigned
     * integers, bytes) moved by one transaction: an out-of-place all-gather and, for world > 1, a
     * send to the next rank and a receive from the previous one; random bytes, compared byte by byte
     * (data movement is bit-exact on every backend). Reductions of FP32, BF16 and INT32 are in the
     * other scenarios.
     */
    static void everyDataType(RankContext c) {
        int n = c.world;
        int next = (c.rank + 1) % n;
        int prev = (c.rank + n - 1) % n;
        int count = 120;
        for (dev.jnccl.DType dtype : dev.jnccl.DType.values()) {
            int bytes = count * dtype.size();
            String tag = "dtype." + dtype;
            DeviceTensor shard = uploadBytes(c, dtype, Data.bytes(c.seed(c.rank, tag), bytes));
            DeviceTensor full = uploadBytes(c, dtype, Data.bytes(c.seed(c.rank, tag + ".sentinel"), bytes * n));
            DeviceTensor received = uploadBytes(c, dtype, Data.bytes(c.seed(c.rank, tag + ".recv.sentinel"), bytes));
            CudaEvent signal = c.event();
            try (Transaction tx = c.comm.begin(c.compute())) {
                tx.allGather(shard, full);
                if (n > 1) {
                    tx.send(shard, next).recv(received, prev);
                }
                tx.execute(signal);
            }
            c.comm.await(signal);
            byte[] got = downloadBytes(c, full);
            for (int r = 0; r < n; r++) {
                assertArrayEquals(Data.bytes(c.seed(r, tag), bytes), java.util.Arrays.copyOfRange(got, r * bytes,
                        (r + 1) * bytes), c.what("allGather " + dtype + ", slice of rank " + r));
            }
            if (n > 1) {
                assertArrayEquals(Data.bytes(c.seed(prev, tag), bytes), downloadBytes(c, received),
                        c.what("recv " + dtype + " from rank " + prev));
            }
        }
    }

    private static DeviceTensor uploadBytes(RankContext c, dev.jnccl.DType dtype, byte[] bytes) {
        DeviceTensor tensor = c.alloc(dtype, bytes.length / dtype.size());
        dev.jnccl.cuda.DeviceMemory.wrap(tensor.address(), tensor.bytes(), c.comm.device())
                .copyFromHost(java.lang.foreign.MemorySegment.ofArray(bytes));
        return tensor;
    }

    private static byte[] downloadBytes(RankContext c, DeviceTensor tensor) {
        byte[] bytes = new byte[Math.toIntExact(tensor.bytes())];
        dev.jnccl.cuda.DeviceMemory.wrap(tensor.address(), tensor.bytes(), c.comm.device())
                .copyToHost(java.lang.foreign.MemorySegment.ofArray(bytes));
        return bytes;
    }

    // ================================================================== host helpers

    static void hostHelpers(RankContext c) {
        int n = c.world;
        for (int i = 0; i < 3; i++) {
            c.comm.barrier();
        }
        List<byte[]> all = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            all.add(Data.bytes(c.seed(r, "host"), (r * 5) % 7 + 1));
        }
        byte[] mine = all.get(c.rank);
        for (int root : new int[] {0, n - 1}) {
            List<byte[]> gathered = c.comm.gatherBytesHost(mine.clone(), root);
            if (c.rank == root) {
                assertEquals(n, gathered.size(), c.what("gatherBytesHost at root " + root + ": entries"));
                for (int r = 0; r < n; r++) {
                    assertArrayEquals(all.get(r), gathered.get(r), c.what("gatherBytesHost at root " + root + ", rank " + r));
                }
            } else {
                assertTrue(gathered.isEmpty(), c.what("gatherBytesHost: non-root rank gets an empty list"));
            }
        }
        List<byte[]> everywhere = c.comm.allGatherBytesHost(mine.clone());
        assertEquals(n, everywhere.size(), c.what("allGatherBytesHost: entries"));
        for (int r = 0; r < n; r++) {
            assertArrayEquals(all.get(r), everywhere.get(r), c.what("allGatherBytesHost, rank " + r));
        }
        // Each rank owns what it got: writing into it must not show on another rank.
        for (byte[] received : everywhere) {
            java.util.Arrays.fill(received, (byte) c.rank);
        }
        c.comm.barrier();
        for (int r = 0; r < n; r++) {
            for (byte b : everywhere.get(r)) {
                assertEquals((byte) c.rank, b, c.what("allGatherBytesHost: entry " + r + " was written by another rank"));
            }
        }
        long[] longs = c.comm.allGatherLongsHost(c.seed(c.rank, "long"));
        for (int r = 0; r < n; r++) {
            assertEquals(c.seed(r, "long"), longs[r], c.what("allGatherLongsHost, rank " + r));
        }
        c.comm.barrier();
    }

    // ================================================================== mixed transaction

    /**
     * One transaction with all-gathers (out of place and in place), reduce-scatters (FP32, BF16),
     * a send/recv ring and a destructive all-to-all: one NCCL group plus the all-to-all's rounds,
     * with memcpy transports where the mode says so.
     */
    static void mixedTransaction(RankContext c) {
        int n = c.world;
        int shard = N / n;
        int from = c.rank * shard;
        int next = (c.rank + 1) % n;
        int prev = (c.rank + n - 1) % n;
        List<float[]> gShards = c.fp32All("mixed.ag", SHARD);
        List<int[]> gInPlace = c.int32All("mixed.ag.inplace", SHARD);
        List<float[]> rs = c.fp32All("mixed.rs", N);
        List<short[]> rsb = c.bf16All("mixed.rs.bf16", N);
        List<float[]> a2a = c.fp32All("mixed.a2a", n * SLOT);
        DeviceTensor gShard = c.upload(gShards.get(c.rank));
        DeviceTensor gFull = c.upload(Data.fp32(c.seed(c.rank, "mixed.ag.sentinel"), SHARD * n));
        int[] inPlaceInit = Data.int32(c.seed(c.rank, "mixed.ag.inplace.sentinel"), SHARD * n);
        System.arraycopy(gInPlace.get(c.rank), 0, inPlaceInit, c.rank * SHARD, SHARD);
        DeviceTensor gIn = c.upload(inPlaceInit);
        DeviceTensor tRs = c.upload(rs.get(c.rank));
        DeviceTensor tRsb = c.upload(rsb.get(c.rank));
        DeviceTensor tA2a = c.upload(a2a.get(c.rank));
        DeviceTensor send = c.upload(Data.fp32(c.seed(c.rank, "mixed.p2p"), SHARD));
        DeviceTensor recv = c.upload(Data.fp32(c.seed(c.rank, "mixed.p2p.sentinel"), SHARD));
        CudaEvent ready = c.event();
        CudaEvent signal = c.event();
        c.compute().record(ready);
        try (Transaction tx = c.comm.begin(ready)) {
            tx.allGather(gShard, gFull);
            tx.reduceScatter(tRs);
            tx.destructiveAllToAll(tA2a);
            tx.send(send, next).recv(recv, prev); // to itself at world 1
            tx.reduceScatter(tRsb, ReduceOp.SUM);
            tx.allGather(gIn.shard(c.rank, n), gIn);
            assertEquals(7, tx.size(), c.what("mixed transaction: commands"));
            tx.execute(signal);
        }
        c.comm.await(signal);
        float[] full = c.floats(gFull);
        int[] in = c.ints(gIn);
        for (int r = 0; r < n; r++) {
            Verify.floats(c.what("mixed: allGather out of place, slice " + r), gShards.get(r), Data.slice(full, r * SHARD, SHARD));
            Verify.ints(c.what("mixed: allGather in place, slice " + r), gInPlace.get(r), Data.slice(in, r * SHARD, SHARD));
        }
        Verify.floats(c.what("mixed: reduceScatter FP32"), Data.reduce(rs, ReduceOp.SUM, from, shard, Data.Ring.reduceScatter(c.rank, c.world)),
                c.floats(tRs.shard(c.rank, n)), c.exact, Data.magnitude(rs, from, shard));
        Verify.bf16(c.what("mixed: reduceScatter BF16"), Data.reduceBf16(rsb, ReduceOp.SUM, from, shard, Data.Ring.reduceScatter(c.rank, c.world)),
                c.bf16(tRsb.shard(c.rank, n)), c.exact, Data.magnitudeBf16(rsb, from, shard));
        checkAllToAll(c, a2a, c.floats(tA2a), "mixed: destructiveAllToAll");
        Verify.floats(c.what("mixed: recv from rank " + prev), Data.fp32(c.seed(prev, "mixed.p2p"), SHARD), c.floats(recv));
    }

    // ================================================================== send-only transactions

    private static int sendOnlyCount(int peer) {
        return 256 + 16 * peer;
    }

    /**
     * Rank 0 sends to every other rank (two messages to rank 1) and receives nothing; the others
     * only receive (rank 1 twice). Then the reverse: everybody sends to rank 0, which receives
     * n - 1 messages while the others receive none.
     */
    static void sendOnly(RankContext c) {
        int n = c.world;
        if (n == 1) {
            emptyTransaction(c);
            return;
        }
        CudaEvent signal = c.event();
        if (c.rank == 0) {
            List<DeviceTensor> sends = new ArrayList<>();
            try (Transaction tx = c.comm.begin(c.compute())) {
                for (int peer = 1; peer < n; peer++) {
                    DeviceTensor t = c.upload(Data.fp32(c.seed(peer, "sendOnly.to"), sendOnlyCount(peer)));
                    sends.add(t);
                    tx.send(t, peer);
                }
                tx.send(c.upload(Data.int32(c.seed(1, "sendOnly.extra"), 100)), 1);
                tx.execute(signal);
            }
            c.comm.await(signal);
            for (int peer = 1; peer < n; peer++) {
                Verify.floats(c.what("sendOnly: send buffer to rank " + peer + " unchanged"),
                        Data.fp32(c.seed(peer, "sendOnly.to"), sendOnlyCount(peer)), c.floats(sends.get(peer - 1)));
            }
        } else {
            DeviceTensor in = c.upload(Data.fp32(c.seed(c.rank, "sendOnly.sentinel"), sendOnlyCount(c.rank)));
            DeviceTensor extra = c.rank == 1 ? c.upload(Data.int32(c.seed(c.rank, "sendOnly.extra.sentinel"), 100)) : null;
            try (Transaction tx = c.comm.begin(c.compute())) {
                tx.recv(in, 0);
                if (extra != null) {
                    tx.recv(extra, 0);
                }
                tx.execute(signal);
            }
            c.comm.await(signal);
            Verify.floats(c.what("sendOnly: message from rank 0"), Data.fp32(c.seed(c.rank, "sendOnly.to"),
                    sendOnlyCount(c.rank)), c.floats(in));
            if (extra != null) {
                Verify.ints(c.what("sendOnly: second message from rank 0"), Data.int32(c.seed(1, "sendOnly.extra"), 100),
                        c.ints(extra));
            }
        }
        // The reverse: rank 0 receives n - 1 messages, the others receive none.
        CudaEvent signal2 = c.event();
        if (c.rank == 0) {
            List<DeviceTensor> ins = new ArrayList<>();
            try (Transaction tx = c.comm.begin(c.compute())) {
                for (int peer = 1; peer < n; peer++) {
                    DeviceTensor t = c.upload(Data.fp32(c.seed(peer, "sendOnly.back.sentinel"), sendOnlyCount(peer)));
                    ins.add(t);
                    tx.recv(t, peer);
                }
                tx.execute(signal2);
            }
            c.comm.await(signal2);
            for (int peer = 1; peer < n; peer++) {
                Verify.floats(c.what("sendOnly: message from rank " + peer + " to rank 0"),
                        Data.fp32(c.seed(peer, "sendOnly.back"), sendOnlyCount(peer)), c.floats(ins.get(peer - 1)));
            }
        } else {
            try (Transaction tx = c.comm.begin(c.compute())) {
                tx.send(c.upload(Data.fp32(c.seed(c.rank, "sendOnly.back"), sendOnlyCount(c.rank))), 0);
                tx.execute(signal2);
            }
            c.comm.await(signal2);
        }
    }

    // ================================================================== overlap with compute

    /**
     * A compute stream produces the inputs (async copies and a fill, slowed down on the host
     * emulation so that a missing wait would read stale data), records the ready event; the
     * transaction runs after it; the compute stream waits for the signal, then copies the results
     * out and overwrites the transaction's source buffers (peers must have finished reading them
     * when the signal fires); only then does the host look. A second transaction starts from the
     * compute stream itself ({@code begin(CudaStream)}).
     *
     * @param compute a compute stream of this rank (possibly slowed down)
     */
    static void overlapWithCompute(RankContext c, CudaStream compute) {
        int n = c.world;
        int shard = N / n;
        int from = c.rank * shard;
        List<float[]> rs = c.fp32All("overlap.rs", N);
        List<float[]> ag = c.fp32All("overlap.ag", SHARD);
        List<float[]> rs2 = c.fp32All("overlap.rs2", N);
        DeviceTensor rsSource = c.upload(rs.get(c.rank));
        DeviceTensor agSource = c.upload(ag.get(c.rank));
        DeviceTensor rs2Source = c.upload(rs2.get(c.rank));
        DeviceTensor junk = c.upload(Data.fp32(c.seed(c.rank, "overlap.junk"), N));
        // What the transactions use; they hold junk until the compute stream has produced the data.
        DeviceTensor rsData = c.upload(Data.fp32(c.seed(c.rank, "overlap.rs.stale"), N));
        DeviceTensor agShard = c.upload(Data.fp32(c.seed(c.rank, "overlap.ag.stale"), SHARD));
        DeviceTensor agFull = c.alloc(dev.jnccl.DType.FP32, (long) SHARD * n);
        DeviceTensor rs2Data = c.upload(Data.fp32(c.seed(c.rank, "overlap.rs2.stale"), N));
        DeviceTensor rsOut = c.alloc(dev.jnccl.DType.FP32, shard);
        DeviceTensor agOut = c.alloc(dev.jnccl.DType.FP32, (long) SHARD * n);
        DeviceTensor rs2Out = c.alloc(dev.jnccl.DType.FP32, shard);
        CudaEvent ready = c.event();
        CudaEvent signal = c.event();
        CudaEvent signal2 = c.event();

        // "compute" produces the inputs
        compute.copyAsync(rsSource, rsData);
        compute.copyAsync(agSource, agShard);
        dev.jnccl.cuda.DeviceMemory.wrap(agFull.address(), agFull.bytes(), c.comm.device()).fill((byte) 0x5a, compute);
        compute.record(ready);
        try (Transaction tx = c.comm.begin(ready)) {
            tx.reduceScatter(rsData).allGather(agShard, agFull);
            tx.execute(signal);
        }
        // more "compute" meanwhile, then the second transaction from the stream itself
        compute.copyAsync(rs2Source, rs2Data);
        try (Transaction tx = c.comm.begin(compute)) {
            tx.reduceScatter(rs2Data);
            tx.execute(signal2);
        }
        // "compute" consumes the results after the signals, then reuses the source buffers
        compute.waitFor(signal);
        compute.copyAsync(rsData.shard(c.rank, n), rsOut);
        compute.copyAsync(agFull, agOut);
        compute.copyAsync(junk.slice(0, SHARD), agShard);
        compute.copyAsync(junk, rsData);
        compute.waitFor(signal2);
        compute.copyAsync(rs2Data.shard(c.rank, n), rs2Out);
        compute.copyAsync(junk, rs2Data);
        compute.synchronize();

        Verify.floats(c.what("overlap: reduceScatter after the ready event"), Data.reduce(rs, ReduceOp.SUM, from, shard, Data.Ring.reduceScatter(c.rank, c.world)),
                c.floats(rsOut), c.exact, Data.magnitude(rs, from, shard));
        float[] full = c.floats(agOut);
        for (int r = 0; r < n; r++) {
            Verify.floats(c.what("overlap: allGather after the ready event, slice " + r), ag.get(r),
                    Data.slice(full, r * SHARD, SHARD));
        }
        Verify.floats(c.what("overlap: reduceScatter begun from the compute stream"),
                Data.reduce(rs2, ReduceOp.SUM, from, shard, Data.Ring.reduceScatter(c.rank, c.world)), c.floats(rs2Out), c.exact, Data.magnitude(rs2, from, shard));
        // Everybody has looked before anybody leaves (and frees what peers might read).
        c.comm.barrier();
    }
}
