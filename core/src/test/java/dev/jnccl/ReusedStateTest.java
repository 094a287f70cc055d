package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.util.Random;
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
            assertTrue(open.toString().contains("Broadcast"), open.toString());

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
}
