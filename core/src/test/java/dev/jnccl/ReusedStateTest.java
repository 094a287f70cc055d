package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.spi.Command;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.Random;
import java.util.function.Consumer;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * What the communicator reuses between transactions (one command buffer, the flight recorder's
 * slots, transactions as handles of it) never shows: a handle kept after its transaction ended
 * says how it ended and cannot touch a later transaction, and the flight recorder lists exactly
 * the commands of each recorded transaction, however its slots were used before.
 */
class ReusedStateTest {

    @Test
    void aStaleHandleNeverAddsToALaterTransaction() throws Exception {
        try (Communicator comm = Communicator.single(0); CudaStream stream = CudaStream.create();
             DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 64)) {
            DeviceTensor tensor = memory.tensor(DType.FP32);
            Transaction first = comm.begin(stream).allReduce(tensor, ReduceOp.SUM);
            first.execute(null);
            Transaction discarded = comm.begin(stream).allReduce(tensor, ReduceOp.MAX);
            discarded.close();
            Transaction open = comm.begin(stream).broadcast(tensor, 0);

            assertEquals("allReduce: transaction #1 of rank 0 was already executed", assertThrows(
                    IllegalStateException.class, () -> first.allReduce(tensor, ReduceOp.SUM)).getMessage());
            assertEquals("send: transaction #2 of rank 0 was closed without executing", assertThrows(
                    IllegalStateException.class, () -> discarded.send(tensor, 0)).getMessage());
            first.close(); // closing an ended transaction does nothing, to the open one neither
            discarded.close();
            assertEquals(1, open.size(), "only the open transaction's own command");
            assertTrue(open.isOpen());
            assertFalse(first.isOpen());
            assertEquals(0, first.size());
            assertEquals(1, first.number());
            assertEquals(3, open.number());
            assertTrue(open.toString().contains("broadcast FP32 64 elements"), open.toString());

            // Another thread with the open handle: refused, naming both threads.
            AtomicReference<Throwable> fromOther = new AtomicReference<>();
            Thread other = Thread.ofPlatform().name("other-thread").start(() -> {
                try {
                    open.allReduce(tensor, ReduceOp.SUM);
                } catch (Throwable e) {
                    fromOther.set(e);
                }
            });
            other.join(10_000);
            assertTrue(fromOther.get() instanceof IllegalStateException, String.valueOf(fromOther.get()));
            assertTrue(fromOther.get().getMessage().contains("belongs to thread \"" + Thread.currentThread().getName()
                    + "\" that began it; it was used from thread \"other-thread\""), fromOther.get().getMessage());
            assertEquals(1, open.size());
            open.execute(null);

            // Long after: the outcome is no longer remembered, the refusal stays.
            for (int i = 0; i < 1100; i++) {
                comm.begin(stream).execute(null);
            }
            String stale = assertThrows(IllegalStateException.class, () -> first.execute(null)).getMessage();
            assertTrue(stale.startsWith("execute: transaction #1 of rank 0 has ended (executed or closed;"), stale);
            comm.synchronize();
        }
    }

    @Test
    void theFlightRecorderListsEachTransactionsOwnCommands() {
        CommunicatorOptions options = CommunicatorOptions.defaults().withFlightRecorderSize(3);
        Random random = new Random();
        try (Communicator comm = Communicator.single(0, options); CudaStream stream = CudaStream.create();
             DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 4096)) {
            DeviceTensor all = memory.tensor(DType.FP32);
            int[] sizes = new int[8];
            for (int t = 0; t < sizes.length; t++) {
                // A different number of commands each time (more than a slot first holds, then fewer).
                sizes[t] = 1 + random.nextInt(9);
                Transaction tx = comm.begin(stream);
                for (int c = 0; c < sizes[t]; c++) {
                    tx.allReduce(all.slice(0, 1 + 100 * t + c), ReduceOp.SUM);
                }
                tx.execute(null);
            }
            comm.synchronize();
            String dump = comm.recentTransactions();
            assertTrue(dump.startsWith("last 3 transaction(s), oldest first:"), dump);
            for (int t = 0; t < sizes.length; t++) {
                boolean kept = t >= sizes.length - 3;
                assertEquals(kept, dump.contains("\n    #" + (t + 1) + " "), "transaction #" + (t + 1) + ": " + dump);
                if (kept) {
                    assertTrue(dump.contains("#" + (t + 1) + " age ") && dump.contains(sizes[t] + " command(s)"), dump);
                }
                for (int c = 0; c < 9; c++) {
                    String line = "allReduce SUM FP32 " + (1 + 100 * t + c) + " elements";
                    assertEquals(kept && c < sizes[t], dump.contains(line), line + " in " + dump);
                }
            }
        }
    }

    /**
     * An uneven all-to-all is reused only with the same counts, and the counts are the ones the
     * call saw: changing the caller's arrays afterwards (within the transaction, or before the next
     * one) changes nothing already added, and a transaction with two of them keeps both apart.
     * World 1: the all-to-all copies the first {@code counts[0]} elements of send into recv.
     */
    @Test
    void anUnevenAllToAllKeepsTheCountsItWasGiven() {
        Random random = new Random();
        int count = 256;
        try (Communicator comm = Communicator.single(0); CudaStream stream = CudaStream.create();
             DeviceMemory send = DeviceMemory.allocate(DType.FP32, count);
             DeviceMemory recv = DeviceMemory.allocate(DType.FP32, count); Arena arena = Arena.ofConfined()) {
            DeviceTensor sendTensor = send.tensor(DType.FP32);
            DeviceTensor recvTensor = recv.tensor(DType.FP32);
            long[] counts = new long[1];
            Command previous = null;
            int[] lengths = {100, 100, 37, 256, 256, 0, 37};
            for (int t = 0; t < lengths.length; t++) {
                MemorySegment input = TestData.random(arena, DType.FP32, count, random);
                MemorySegment before = TestData.random(arena, DType.FP32, count, random);
                send.copyFromHost(input);
                recv.copyFromHost(before);
                counts[0] = lengths[t];
                Transaction tx = comm.begin(stream).allToAll(sendTensor, counts, recvTensor, counts);
                counts[0] = count - lengths[t]; // after the call: changes nothing added
                Command added = comm.pendingCommands().snapshot().get(0);
                assertTrue(added.kind() == Command.Kind.UNEVEN_ALL_TO_ALL && added.sendCount(0) == lengths[t]
                        && added.recvCount(0) == lengths[t], added.toString());
                boolean same = t > 0 && lengths[t] == lengths[t - 1];
                assertEquals(same, added == previous, "transaction " + t + ": reused exactly when the counts repeat");
                previous = added;
                tx.execute(null);
                comm.synchronize();
                MemorySegment result = arena.allocate((long) count * Float.BYTES);
                recv.copyToHost(result);
                for (int i = 0; i < count; i++) {
                    float expected = (i < lengths[t] ? input : before).getAtIndex(ValueLayout.JAVA_FLOAT, i);
                    assertEquals(expected, result.getAtIndex(ValueLayout.JAVA_FLOAT, i),
                            "transaction " + t + " (" + lengths[t] + " elements), element " + i);
                }
            }

            // Two in one transaction, the second with other counts in the same (reused) caller array.
            try (Transaction tx = comm.begin(stream)) {
                counts[0] = 10;
                tx.allToAll(sendTensor, counts, recvTensor, counts);
                counts[0] = 20;
                tx.allToAll(sendTensor, counts, recvTensor, counts);
                List<Command> added = comm.pendingCommands().snapshot();
                assertEquals(10, added.get(0).sendCount(0), added.toString());
                assertEquals(20, added.get(1).sendCount(0), added.toString());
            }

            // Refused counts leave the transaction without the command, and the next call works.
            try (Transaction tx = comm.begin(stream)) {
                IllegalArgumentException refused = assertThrows(IllegalArgumentException.class,
                        () -> tx.allToAll(sendTensor, new long[] {count + 1}, recvTensor, new long[] {count + 1}));
                assertTrue(refused.getMessage().contains("sendCounts"), refused.getMessage());
                assertEquals(0, tx.size());
                assertThrows(IllegalArgumentException.class,
                        () -> tx.allToAll(sendTensor, new long[] {1, 1}, recvTensor, counts));
                tx.allToAll(sendTensor, new long[] {5}, recvTensor, new long[] {5});
                assertEquals(1, tx.size());
            }
        }
    }

    /** Reduce, gather and scatter commands are reused only when everything they name repeats. */
    @Test
    void rootedCommandsAreReusedOnlyWhenTheyRepeat() {
        try (Communicator comm = Communicator.single(0); CudaStream stream = CudaStream.create();
             DeviceMemory a = DeviceMemory.allocate(DType.FP32, 64); DeviceMemory b = DeviceMemory.allocate(DType.FP32, 64)) {
            DeviceTensor x = a.tensor(DType.FP32);
            DeviceTensor y = b.tensor(DType.FP32);
            List<Consumer<Transaction>> steps = List.of(
                    tx -> tx.reduce(x, y, ReduceOp.SUM, 0), tx -> tx.reduce(x, y, ReduceOp.SUM, 0),
                    tx -> tx.reduce(x, y, ReduceOp.MAX, 0), tx -> tx.reduce(y, x, ReduceOp.MAX, 0),
                    tx -> tx.gather(x, y, 0), tx -> tx.gather(x, y, 0), tx -> tx.gather(y, x, 0),
                    tx -> tx.scatter(x, y, 0), tx -> tx.scatter(x, y, 0), tx -> tx.scatter(x.slice(0, 64), y, 0),
                    tx -> tx.scatter(y, x, 0));
            boolean[] reused = {false, true, false, false, false, true, false, false, true, true, false};
            Command previous = null;
            for (int i = 0; i < steps.size(); i++) {
                try (Transaction tx = comm.begin(stream)) {
                    steps.get(i).accept(tx);
                    Command added = comm.pendingCommands().snapshot().get(0);
                    assertEquals(reused[i], added == previous, "step " + i + ": " + added + " after " + previous);
                    if (i > 0 && !reused[i]) {
                        assertFalse(added.equals(previous), "step " + i + " differs from the one before");
                    } else if (i > 0) {
                        assertEquals(previous, added);
                    }
                    previous = added;
                }
            }
        }
    }
}
