package dev.jnccl.it;

import dev.jnccl.Communicator;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.JncclRuntime;
import dev.jnccl.ReduceOp;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import java.util.ArrayList;
import java.util.List;
import java.util.function.IntBinaryOperator;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * The operations beyond the original four as rank bodies shared by threads mode
 * ({@link ThreadsOpsTest}) and MPI mode ({@link MpiRank}): broadcast from every root, send/recv to the rank itself, the
 * non-destructive all-to-all of every dtype and sub-communicators. Random data from per-rank seeds,
 * compared element by element (bit for bit: the operations only move data, or reduce integers).
 */
final class OpsScenarios {
    /** Elements per slot of an all-to-all, and of broadcast tensors (small: the matrices run on a 2-core CI). */
    static final int SLOT = 96;

    private OpsScenarios() {}

    /**
     * Broadcast from every root: FP32 and INT32 in one transaction, BF16 by the convenience form.
     */
    static void broadcastFromEveryRoot(RankContext c) {
        for (int root = 0; root < c.world; root++) {
            String tag = "bcast." + root;
            float[] mine = Data.fp32(c.seed(c.rank, tag), SLOT * 3);
            int[] mineInts = Data.int32(c.seed(c.rank, tag + ".i32"), SLOT);
            short[] mineBf16 = Data.bf16(c.seed(c.rank, tag + ".bf16"), SLOT + 1);
            DeviceTensor f = c.upload(mine);
            DeviceTensor i = c.upload(mineInts);
            DeviceTensor b = c.upload(mineBf16);
            CudaEvent signal = c.event();
            try (Transaction tx = c.comm.begin(c.compute())) {
                tx.broadcast(f, root).broadcast(i, root);
                tx.execute(signal);
            }
            c.comm.await(signal);
            c.comm.broadcast(b, root, c.compute());
            c.compute().synchronize();
            Verify.floats(c.what("broadcast FP32 from root " + root), Data.fp32(c.seed(root, tag), SLOT * 3),
                    c.floats(f));
            Verify.ints(c.what("broadcast INT32 from root " + root), Data.int32(c.seed(root, tag + ".i32"), SLOT),
                    c.ints(i));
            Verify.bf16(c.what("convenience broadcast BF16 from root " + root),
                    Data.bf16(c.seed(root, tag + ".bf16"), SLOT + 1), c.bf16(b));
        }
        c.comm.barrier();
    }

    /**
     * The ring of any world size: send to {@code rank + k}, receive from {@code rank - k}, for
     * k = 0 (this rank itself) and k = 1 (the neighbours; the rank itself again at world 1), with
     * other commands in between; then a transaction with only messages to itself.
     */
    static void sendAndReceiveToItselfAloneAndInRings(RankContext c) {
        int n = c.world;
        int next = (c.rank + 1) % n;
        int prev = (c.rank + n - 1) % n;
        DeviceTensor toSelf = c.upload(Data.fp32(c.seed(c.rank, "self"), SLOT));
        DeviceTensor toNext = c.upload(Data.int32(c.seed(c.rank, "ring"), SLOT + 7));
        DeviceTensor fromSelf = c.upload(Data.fp32(c.seed(c.rank, "self.sentinel"), SLOT));
        DeviceTensor fromPrev = c.upload(Data.int32(c.seed(c.rank, "ring.sentinel"), SLOT + 7));
        List<float[]> reduced = c.fp32All("self.rs", SLOT * n);
        DeviceTensor rs = c.upload(reduced.get(c.rank));
        CudaEvent signal = c.event();
        try (Transaction tx = c.comm.begin(c.compute())) {
            // Messages between a pair match in order; at world 1 both pairs are (rank, rank), so the
            // message to itself comes first on both sides.
            tx.recv(fromSelf, c.rank).send(toSelf, c.rank).reduceScatter(rs).recv(fromPrev, prev).send(toNext, next);
            tx.execute(signal);
        }
        c.comm.await(signal);
        Verify.floats(c.what("message to itself"), Data.fp32(c.seed(c.rank, "self"), SLOT), c.floats(fromSelf));
        Verify.ints(c.what("ring message from rank " + prev), Data.int32(c.seed(prev, "ring"), SLOT + 7),
                c.ints(fromPrev));
        Verify.floats(c.what("reduceScatter between the messages"), Data.reduce(reduced, ReduceOp.SUM,
                c.rank * SLOT, SLOT, Data.Ring.reduceScatter(c.rank, n)), c.floats(rs.shard(c.rank, n)), c.exact,
                Data.magnitude(reduced, c.rank * SLOT, SLOT));

        // Only messages to itself, two of them, received in order.
        DeviceTensor a = c.upload(Data.int32(c.seed(c.rank, "self.a"), 33));
        DeviceTensor b = c.upload(Data.int32(c.seed(c.rank, "self.b"), 33));
        DeviceTensor inA = c.alloc(DType.INT32, 33);
        DeviceTensor inB = c.alloc(DType.INT32, 33);
        CudaEvent signal2 = c.event();
        try (Transaction tx = c.comm.begin(c.compute())) {
            tx.send(a, c.rank).send(b, c.rank).recv(inA, c.rank).recv(inB, c.rank);
            tx.execute(signal2);
        }
        c.comm.await(signal2);
        Verify.ints(c.what("first message to itself"), Data.int32(c.seed(c.rank, "self.a"), 33), c.ints(inA));
        Verify.ints(c.what("second message to itself"), Data.int32(c.seed(c.rank, "self.b"), 33), c.ints(inB));
        c.comm.barrier();
    }

    /**
     * Every dtype (all-to-all only moves bytes, so one random byte pattern per rank and dtype is
     * the data), in a transaction between a ring send and its receive (the all-to-all's messages
     * must never pair with them), then the convenience form.
     */
    static void allToAllOfEveryDtype(RankContext c) {
        int n = c.world;
        int next = (c.rank + 1) % n;
        int prev = (c.rank + n - 1) % n;
        for (DType dtype : DType.values()) {
            if (!JncclRuntime.query().supports(dtype)) {
                continue;
            }
            int slotBytes = SLOT * dtype.size();
            String tag = "a2a." + dtype;
            DeviceTensor send = c.upload(dtype, Data.bytes(c.seed(c.rank, tag), slotBytes * n));
            DeviceTensor recv = c.upload(dtype, Data.bytes(c.seed(c.rank, tag + ".sentinel"), slotBytes * n));
            DeviceTensor recv2 = c.upload(dtype, Data.bytes(c.seed(c.rank, tag + ".sentinel2"), slotBytes * n));
            DeviceTensor ring = c.upload(DType.INT32, Data.bytes(c.seed(c.rank, tag + ".ring"), 64));
            DeviceTensor ringIn = c.alloc(DType.INT32, 16);
            CudaEvent signal = c.event();
            try (Transaction tx = c.comm.begin(c.compute())) {
                // Between a send and its receive: the all-to-all never pairs with them.
                tx.send(ring, next).allToAll(send, recv).recv(ringIn, prev);
                tx.execute(signal);
            }
            c.comm.await(signal);
            c.comm.allToAll(send, recv2, c.compute());
            c.compute().synchronize();
            byte[] expected = new byte[slotBytes * n];
            for (int from = 0; from < n; from++) {
                // slot `rank` of rank `from`'s send buffer lands in slot `from` here
                System.arraycopy(Data.bytes(c.seed(from, tag), slotBytes * n), c.rank * slotBytes, expected,
                        from * slotBytes, slotBytes);
            }
            assertArrayEquals(expected, c.raw(recv), c.what("allToAll " + dtype + " in a transaction"));
            assertArrayEquals(expected, c.raw(recv2), c.what("convenience allToAll " + dtype));
            assertArrayEquals(Data.bytes(c.seed(c.rank, tag), slotBytes * n), c.raw(send),
                    c.what("allToAll " + dtype + ": send buffer unchanged"));
            assertArrayEquals(Data.bytes(c.seed(prev, tag + ".ring"), 64), c.raw(ringIn),
                    c.what("recv next to the allToAll, from rank " + prev));
        }
        c.comm.barrier();
    }

    /**
     * For every grouping: the members and their order as NCCL's (key, then rank), an all-reduce,
     * an all-gather, a broadcast from the child's last rank, an all-to-all and host gathers among
     * the members only; the parent keeps working between splits.
     */
    static void splitIntoGroups(RankContext c) {
        int n = c.world;
        for (Grouping grouping : GROUPINGS) {
            int color = grouping.color().applyAsInt(c.rank, n);
            int key = grouping.key().applyAsInt(c.rank, n);
            List<Integer> members = new ArrayList<>();
            for (int r = 0; r < n; r++) {
                if (color >= 0 && grouping.color().applyAsInt(r, n) == color) {
                    members.add(r);
                }
            }
            members.sort((a, b) -> {
                int ka = grouping.key().applyAsInt(a, n);
                int kb = grouping.key().applyAsInt(b, n);
                return ka != kb ? Integer.compare(ka, kb) : Integer.compare(a, b);
            });
            var child = c.comm.split(color, key);
            String what = grouping + " (color " + color + ", key " + key + ")";
            if (color < 0) {
                assertTrue(child.isEmpty(), c.what(what + ": no communicator for a negative color"));
            } else {
                try (Communicator sub = child.orElseThrow()) {
                    checkChild(c, sub, members, what, grouping + " color " + color);
                }
            }
            // The parent still works (and all ranks are past the split) before the next grouping.
            long[] ranks = c.comm.allGatherLongsHost(c.rank);
            assertEquals(n, ranks.length, c.what(what + ": parent host gather after the split"));
        }
    }

    /** How ranks are grouped: color and key of {@code rank} in a world of {@code n}. */
    private record Grouping(String name, IntBinaryOperator color, IntBinaryOperator key) {
        @Override
        public String toString() {
            return name;
        }
    }

    private static final List<Grouping> GROUPINGS = List.of(
            new Grouping("halves", (rank, n) -> rank < (n + 1) / 2 ? 0 : 1, (rank, n) -> rank),
            new Grouping("odd/even, reverse key order", (rank, n) -> rank % 2, (rank, n) -> -rank),
            new Grouping("singletons", (rank, n) -> rank, (rank, n) -> 0),
            // rank 0 opts out; the others form one group ordered by key rank mod 3, ties by rank
            new Grouping("all but rank 0, keys with ties", (rank, n) -> rank == 0 ? -1 : 5, (rank, n) -> rank % 3),
            // after a split that rank 0 sat out, every rank again: the splits are numbered alike everywhere
            new Grouping("all, after rank 0 sat one out", (rank, n) -> 0, (rank, n) -> n - rank));

    private static void checkChild(RankContext c, Communicator sub, List<Integer> members, String what, String group) {
        int m = members.size();
        int me = members.indexOf(c.rank);
        assertEquals(m, sub.worldSize(), c.what(what + ": child world size"));
        assertEquals(me, sub.rank(), c.what(what + ": child rank"));
        assertEquals(c.comm.device(), sub.device(), c.what(what + ": child device"));
        assertEquals(c.comm, sub.parent().orElseThrow(), c.what(what + ": parent"));
        String tag = group + " child"; // the same on every member

        // all-reduce (INT32 SUM wraps exactly), all-gather, broadcast from the last child rank
        List<int[]> sums = new ArrayList<>();
        for (int member : members) {
            sums.add(Data.int32(c.seed(member, tag + ".sum"), SLOT));
        }
        DeviceTensor sum = c.upload(sums.get(me));
        DeviceTensor shard = c.upload(Data.fp32(c.seed(c.rank, tag + ".shard"), SLOT));
        DeviceTensor full = c.alloc(DType.FP32, (long) SLOT * m);
        DeviceTensor bcast = c.upload(Data.fp32(c.seed(c.rank, tag + ".bcast"), SLOT));
        CudaEvent signal = c.event();
        try (Transaction tx = sub.begin(c.compute())) {
            tx.allGather(shard, full).broadcast(bcast, m - 1);
            tx.execute(signal);
        }
        sub.await(signal);
        sub.allReduce(sum, ReduceOp.SUM, c.compute());
        // all-to-all among the members
        DeviceTensor send = c.upload(Data.int32(c.seed(c.rank, tag + ".a2a"), SLOT * m));
        DeviceTensor recv = c.alloc(DType.INT32, (long) SLOT * m);
        sub.allToAll(send, recv, c.compute());
        c.compute().synchronize();

        Verify.ints(c.what(what + ": child allReduce"), Data.reduceInt(sums, ReduceOp.SUM, 0, SLOT), c.ints(sum));
        float[] gathered = c.floats(full);
        for (int r = 0; r < m; r++) {
            Verify.floats(c.what(what + ": child allGather, slice of child rank " + r),
                    Data.fp32(c.seed(members.get(r), tag + ".shard"), SLOT), Data.slice(gathered, r * SLOT, SLOT));
        }
        Verify.floats(c.what(what + ": child broadcast from child rank " + (m - 1)),
                Data.fp32(c.seed(members.get(m - 1), tag + ".bcast"), SLOT), c.floats(bcast));
        int[] received = c.ints(recv);
        for (int r = 0; r < m; r++) {
            Verify.ints(c.what(what + ": child allToAll, slot from child rank " + r),
                    Data.slice(Data.int32(c.seed(members.get(r), tag + ".a2a"), SLOT * m), me * SLOT, SLOT),
                    Data.slice(received, r * SLOT, SLOT));
        }

        // host side among the members only
        sub.barrier();
        long[] parentRanks = sub.allGatherLongsHost(c.rank);
        long[] expected = members.stream().mapToLong(Integer::longValue).toArray();
        assertArrayEquals(expected, parentRanks, c.what(what + ": child allGatherLongsHost = members in child order"));
        List<byte[]> atRoot = sub.gatherBytesHost(new byte[] {(byte) c.rank}, 0);
        if (me == 0) {
            assertEquals(m, atRoot.size(), c.what(what + ": child gatherBytesHost entries"));
            for (int r = 0; r < m; r++) {
                assertEquals(members.get(r).byteValue(), atRoot.get(r)[0], c.what(what + ": gather entry " + r));
            }
        } else {
            assertTrue(atRoot.isEmpty(), c.what(what + ": non-root gets nothing"));
        }
        sub.barrier();
    }
}
