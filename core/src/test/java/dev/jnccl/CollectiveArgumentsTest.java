package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.spi.Command;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * The argument checks of the out-of-place, rooted and uneven collectives on a world of 3: every
 * bad argument is refused before anything native happens (the transaction stays empty), naming
 * the argument, its value and what is allowed; the good ones become the expected commands (in
 * place when NCCL's in-place rule holds, null buffers on non-roots).
 */
class CollectiveArgumentsTest {

    private static void expect(Class<? extends Throwable> type, String message, Executable call) {
        Throwable thrown = assertThrows(type, call);
        assertEquals(message, thrown.getMessage());
    }

    @Test
    void badArgumentsAreRefusedBeforeAnythingNative() throws Throwable {
        List<Object> results = LocalRanks.run(3, CommunicatorOptions.defaults(), comm -> {
            if (comm.rank() != 0) {
                comm.barrier();
                return "peer";
            }
            try (DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 3000); CudaStream stream = CudaStream.create()) {
                DeviceTensor all = memory.tensor(DType.FP32);
                DeviceTensor a = all.slice(0, 300);
                DeviceTensor b = all.slice(1000, 300);
                DeviceTensor whole = all.slice(2000, 900);
                DeviceTensor bytes = new DeviceTensor(memory.address(), DType.BYTE, 300);
                DeviceTensor ints = new DeviceTensor(memory.address() + 4000, DType.INT32, 300);
                try (Transaction tx = comm.begin(stream)) {
                    // out-of-place all-reduce, reduce-scatter, broadcast
                    expect(IllegalArgumentException.class, "allReduce: src dtype FP32 differs from dst dtype INT32",
                            () -> tx.allReduce(a, ints, ReduceOp.SUM));
                    expect(IllegalArgumentException.class, "allReduce: dst has 299 elements, expected src's count 300",
                            () -> tx.allReduce(a, b.slice(0, 299), ReduceOp.SUM));
                    expect(IllegalArgumentException.class, "allReduce: BYTE tensors cannot be reduced (MAX); use a numeric type",
                            () -> tx.allReduce(bytes, new DeviceTensor(b.address(), DType.BYTE, 300), ReduceOp.MAX));
                    expect(IllegalArgumentException.class, "allReduce: src " + a + " and dst " + all.slice(1, 300)
                                    + " overlap but are not in place (in place needs dst equal to src; otherwise they must not overlap)",
                            () -> tx.allReduce(a, all.slice(1, 300), ReduceOp.SUM));
                    expect(NullPointerException.class, "allReduce: dst is null", () -> tx.allReduce(a, null, ReduceOp.SUM));
                    expect(IllegalArgumentException.class,
                            "reduceScatter: src has 300 elements, expected dst 300 x world size 3 = 900",
                            () -> tx.reduceScatter(a, b, ReduceOp.SUM));
                    expect(IllegalArgumentException.class, "reduceScatter: src " + whole + " and dst " + whole.slice(1, 300)
                                    + " overlap but are not in place (in place needs dst this rank's slot of src; otherwise they must not overlap)",
                            () -> tx.reduceScatter(whole, whole.slice(1, 300), ReduceOp.SUM));
                    expect(IllegalArgumentException.class, "broadcast: root 3 out of range [0, 3)", () -> tx.broadcast(a, b, 3));
                    expect(IllegalArgumentException.class, "broadcast: root -1 out of range [0, 3)", () -> tx.broadcast(a, b, -1));
                    expect(IllegalArgumentException.class, "broadcast: dst has 299 elements, expected src's count 300",
                            () -> tx.broadcast(a, b.slice(0, 299), 0));
                    // reduce, gather, scatter: roots, root buffers, sizes, overlap at the root
                    expect(IllegalArgumentException.class, "reduce: root 5 out of range [0, 3)",
                            () -> tx.reduce(a, b, ReduceOp.SUM, 5));
                    expect(IllegalArgumentException.class,
                            "reduce: dst is null on the root rank 0; only ranks other than the root may pass null",
                            () -> tx.reduce(a, null, ReduceOp.SUM, 0));
                    expect(IllegalArgumentException.class, "reduce: dst has 299 elements, expected src's count 300",
                            () -> tx.reduce(a, b.slice(0, 299), ReduceOp.SUM, 1));
                    expect(IllegalArgumentException.class, "reduce: BYTE tensors cannot be reduced (PROD); use a numeric type",
                            () -> tx.reduce(bytes, null, ReduceOp.PROD, 1));
                    expect(IllegalArgumentException.class, "gather: root 3 out of range [0, 3)", () -> tx.gather(a, whole, 3));
                    expect(IllegalArgumentException.class,
                            "gather: dst is null on the root rank 0; only ranks other than the root may pass null",
                            () -> tx.gather(a, null, 0));
                    expect(IllegalArgumentException.class, "gather: dst has 300 elements, expected src 300 x world size 3 = 900",
                            () -> tx.gather(a, b, 0));
                    expect(IllegalArgumentException.class, "gather: src dtype INT32 differs from dst dtype FP32",
                            () -> tx.gather(ints, whole, 2));
                    expect(IllegalArgumentException.class, "gather: src " + whole.slice(301, 300) + " and dst " + whole
                                    + " overlap but are not in place (in place needs src this rank's slot of dst; otherwise they must not overlap)",
                            () -> tx.gather(whole.slice(301, 300), whole, 0));
                    expect(IllegalArgumentException.class, "scatter: root -2 out of range [0, 3)", () -> tx.scatter(whole, a, -2));
                    expect(IllegalArgumentException.class,
                            "scatter: src is null on the root rank 0; only ranks other than the root may pass null",
                            () -> tx.scatter(null, a, 0));
                    expect(IllegalArgumentException.class, "scatter: src has 300 elements, expected dst 300 x world size 3 = 900",
                            () -> tx.scatter(b, a, 1));
                    expect(IllegalArgumentException.class, "scatter: src " + whole + " and dst " + whole.slice(300, 300)
                                    + " overlap but are not in place (in place needs dst this rank's slot of src; otherwise they must not overlap)",
                            () -> tx.scatter(whole, whole.slice(300, 300), 0));
                    // uneven all-to-all
                    expect(IllegalArgumentException.class, "allToAll: sendCounts has 2 entries, expected world size 3",
                            () -> tx.allToAll(a, new long[] {1, 2}, b, new long[] {1, 2, 3}));
                    expect(IllegalArgumentException.class, "allToAll: recvCounts has 4 entries, expected world size 3",
                            () -> tx.allToAll(a, new long[] {1, 2, 3}, b, new long[] {1, 2, 3, 4}));
                    expect(IllegalArgumentException.class, "allToAll: sendCounts[1] = -1 out of range [0, 300]",
                            () -> tx.allToAll(a, new long[] {1, -1, 3}, b, new long[] {1, 2, 3}));
                    expect(IllegalArgumentException.class,
                            "allToAll: recvCounts up to [2] sum past recv's 300 elements (recvCounts[2] = 201 after 100; allowed [0, 200])",
                            () -> tx.allToAll(a, new long[] {1, 2, 3}, b, new long[] {1, 99, 201}));
                    expect(IllegalArgumentException.class,
                            "allToAll: sendCounts up to [1] sum past send's 300 elements (sendCounts[1] = " + Long.MAX_VALUE
                                    + " after 1; allowed [0, 299])",
                            () -> tx.allToAll(a, new long[] {1, Long.MAX_VALUE, 3}, b, new long[] {1, 2, 3}));
                    expect(IllegalArgumentException.class,
                            "allToAll: sendCounts[0] = 4 (to this rank itself) must equal recvCounts[0] = 1",
                            () -> tx.allToAll(a, new long[] {4, 2, 3}, b, new long[] {1, 2, 3}));
                    expect(IllegalArgumentException.class, "allToAll: send dtype FP32 differs from recv dtype INT32",
                            () -> tx.allToAll(a, new long[] {1, 2, 3}, ints, new long[] {1, 2, 3}));
                    expect(IllegalArgumentException.class, "allToAll: send " + a + " and recv " + all.slice(299, 10) + " overlap",
                            () -> tx.allToAll(a, new long[] {1, 2, 3}, all.slice(299, 10), new long[] {1, 2, 3}));
                    expect(NullPointerException.class, "allToAll: recvCounts is null",
                            () -> tx.allToAll(a, new long[] {1, 2, 3}, b, null));
                    // uneven all-gather
                    expect(IllegalArgumentException.class, "allGather: counts has 2 entries, expected world size 3",
                            () -> tx.allGather(a, b, new long[] {300, 0}));
                    expect(NullPointerException.class, "allGather: counts is null", () -> tx.allGather(a, b, null));
                    expect(IllegalArgumentException.class,
                            "allGather: counts[0] = 5 (this rank's block) must equal shard's 300 elements",
                            () -> tx.allGather(a, whole, new long[] {5, 1, 1}));
                    expect(IllegalArgumentException.class,
                            "allGather: counts up to [1] sum past full's 300 elements (counts[1] = 1 after 300; allowed [0, 0])",
                            () -> tx.allGather(a, b, new long[] {300, 1, 0}));
                    expect(IllegalArgumentException.class, "allGather: shard dtype FP32 differs from full dtype INT32",
                            () -> tx.allGather(a, ints, new long[] {300, 0, 0}));
                    expect(IllegalArgumentException.class, "allGather: shard " + a + " and full " + all.slice(1, 900)
                                    + " overlap but are not in place (in place needs shard this rank's block of full;"
                                    + " otherwise they must not overlap)",
                            () -> tx.allGather(a, all.slice(1, 900), new long[] {300, 300, 300}));
                    assertEquals(0, tx.size(), "rejected commands must not be buffered");
                }
                // The convenience forms make the same checks.
                expect(IllegalArgumentException.class, "gather: root 3 out of range [0, 3)", () -> comm.gather(a, whole, 3, stream));
                expect(IllegalArgumentException.class, "allToAll: sendCounts has 1 entries, expected world size 3",
                        () -> comm.allToAll(a, new long[] {1}, b, new long[] {1, 2, 3}, stream));
            }
            comm.barrier();
            return "checked";
        });
        LocalRanks.rethrowAny(results);
        assertEquals("checked", results.get(0));
    }

    @Test
    void goodArgumentsBecomeTheExpectedCommands() throws Throwable {
        List<Object> results = LocalRanks.run(3, CommunicatorOptions.defaults(), comm -> {
            if (comm.rank() != 1) {
                comm.barrier();
                return "peer";
            }
            List<Command> made = new ArrayList<>();
            try (DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 3000); CudaStream stream = CudaStream.create()) {
                DeviceTensor all = memory.tensor(DType.FP32);
                DeviceTensor a = all.slice(0, 300);
                DeviceTensor b = all.slice(1000, 300);
                DeviceTensor whole = all.slice(2000, 900);
                long[] sendCounts = {5, 0, 7};
                try (Transaction tx = comm.begin(stream)) {
                    tx.allReduce(a, a, ReduceOp.MAX).allReduce(a, b, ReduceOp.MIN)
                            .reduceScatter(whole, whole.shard(1, 3), ReduceOp.SUM).reduceScatter(whole, b, ReduceOp.SUM)
                            .broadcast(a, a, 2).broadcast(a, b, 2)
                            .reduce(a, null, ReduceOp.SUM, 0) // not the root: no dst needed
                            .reduce(a, a, ReduceOp.SUM, 1) // the root, in place
                            .gather(a, null, 2).gather(whole.shard(1, 3), whole, 1) // in place at the root
                            .scatter(null, a, 0).scatter(whole, whole.shard(1, 3), 1) // in place at the root
                            .allToAll(a, sendCounts, b, new long[] {1, 0, 2});
                    sendCounts[0] = 99; // copied: the command keeps 5
                    made.addAll(tx.buffer().snapshot());
                }
            }
            comm.barrier();
            return made;
        });
        LocalRanks.rethrowAny(results);
        @SuppressWarnings("unchecked")
        List<Command> made = (List<Command>) results.get(1);
        assertEquals(13, made.size(), made.toString());
        // One command per collective: in place is the same tensor (or this rank's slot of it), as in NCCL.
        Command.Kind[] kinds = {Command.Kind.ALL_REDUCE, Command.Kind.ALL_REDUCE, Command.Kind.REDUCE_SCATTER,
                Command.Kind.REDUCE_SCATTER, Command.Kind.BROADCAST, Command.Kind.BROADCAST, Command.Kind.REDUCE,
                Command.Kind.REDUCE, Command.Kind.GATHER, Command.Kind.GATHER, Command.Kind.SCATTER,
                Command.Kind.SCATTER, Command.Kind.UNEVEN_ALL_TO_ALL};
        for (int i = 0; i < kinds.length; i++) {
            assertEquals(kinds[i], made.get(i).kind(), "command " + i + ": " + made.get(i));
        }
        assertTrue(made.get(0).isSameTensor(), "the same tensor: in place");
        assertFalse(made.get(1).isSameTensor());
        assertTrue(made.get(1).describe().endsWith(", out of place"), made.get(1).describe());
        assertEquals(ReduceOp.MIN, made.get(1).op());
        assertEquals(2, made.get(4).root());
        assertNull(made.get(6).dst(), "a non-root's reduce has no dst");
        assertEquals(0, made.get(6).root());
        assertEquals(-1, made.get(6).peer());
        assertNull(made.get(8).dst());
        assertNull(made.get(10).src());
        Command uneven = made.get(12);
        assertArrayEquals(new long[] {5, 0, 7}, uneven.sendCounts());
        assertArrayEquals(new long[] {1, 0, 2}, uneven.receiveCounts());
        assertEquals(12L * 4, uneven.bytes());
        assertEquals(7, uneven.sendCount(2));
        assertEquals(2, uneven.recvCount(2));
        // A peer that is no rank: refused naming the method, the value and the range.
        assertEquals("Command.sendCount: peer 3 out of range [0, 3)",
                assertThrows(IllegalArgumentException.class, () -> uneven.sendCount(3)).getMessage());
        assertEquals("Command.recvCount: peer -1 out of range [0, 3)",
                assertThrows(IllegalArgumentException.class, () -> uneven.recvCount(-1)).getMessage());
        assertEquals("Command: ALL_REDUCE has no counts",
                assertThrows(IllegalStateException.class, () -> made.get(0).recvCount(0)).getMessage());
    }
}
