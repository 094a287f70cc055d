package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * Every argument and state check of the API, on rank 0 of a world of 3 (so divisibility and peers
 * mean something). Each check must throw before anything native happens, with a message naming the
 * operation, the argument and the values. The C++ original used asserts (compiled out in release).
 */
class ValidationTest {

    private static void expect(Class<? extends Throwable> type, String message, Executable call) {
        Throwable thrown = assertThrows(type, call);
        assertEquals(message, thrown.getMessage());
    }

    @Test
    void everyCheckOfAWorldOfThree() throws Throwable {
        List<Object> results = LocalRanks.run(3, CommunicatorOptions.defaults(), comm -> {
            if (comm.rank() != 0) {
                comm.barrier();
                return "peer";
            }
            List<String> checked = new ArrayList<>();
            try (DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 3000); CudaStream stream = CudaStream.create();
                 CudaEvent event = CudaEvent.create()) {
                DeviceTensor thousand = memory.tensor(DType.FP32).slice(0, 1000);
                DeviceTensor shard = memory.tensor(DType.FP32).slice(0, 333);
                DeviceTensor bf16 = new DeviceTensor(memory.address(), DType.BF16, 999);
                try (Transaction tx = comm.begin(stream)) {
                    expect(IllegalArgumentException.class, "reduceScatter: 1000 elements not divisible by world size 3",
                            () -> tx.reduceScatter(thousand));
                    expect(IllegalArgumentException.class, "destructiveAllToAll: 1000 elements not divisible by world size 3",
                            () -> tx.destructiveAllToAll(thousand));
                    expect(IllegalArgumentException.class, "allGather: shard dtype FP32 differs from full dtype BF16",
                            () -> tx.allGather(shard, bf16));
                    expect(IllegalArgumentException.class,
                            "allGather: full has 1000 elements, expected shard 333 x world size 3 = 999",
                            () -> tx.allGather(shard, thousand));
                    expect(IllegalArgumentException.class, "send: peer 3 out of range [0, 3)", () -> tx.send(shard, 3));
                    expect(IllegalArgumentException.class, "recv: peer -1 out of range [0, 3)", () -> tx.recv(shard, -1));
                    expect(IllegalArgumentException.class, "allToAll: 1000 elements not divisible by world size 3",
                            () -> tx.allToAll(thousand, memory.tensor(DType.FP32).slice(1000, 1000)));
                    expect(IllegalArgumentException.class, "broadcast: root 3 out of range [0, 3)",
                            () -> tx.broadcast(thousand, 3));
                    expect(IllegalArgumentException.class,
                            "reduceScatter: BYTE tensors cannot be reduced (SUM); use a numeric type",
                            () -> tx.reduceScatter(new DeviceTensor(memory.address(), DType.BYTE, 3)));
                    expect(NullPointerException.class, "reduceScatter: tensor is null", () -> tx.reduceScatter(null));
                    expect(NullPointerException.class, "allGather: full is null", () -> tx.allGather(shard, null));
                    expect(IllegalStateException.class,
                            "begin: transaction #1 of rank 0 is still open; execute or close it first",
                            () -> comm.begin(stream));
                    // Memory of another device, and memory that was freed, are refused in Java.
                    dev.jnccl.cuda.Cuda.setDevice(1);
                    DeviceMemory elsewhere = DeviceMemory.allocate(DType.FP32, 999);
                    dev.jnccl.cuda.Cuda.setDevice(0);
                    try (elsewhere) {
                        expect(IllegalArgumentException.class,
                                "reduceScatter: tensor is on device 1 but the communicator of rank 0 is on device 0",
                                () -> tx.reduceScatter(elsewhere.tensor(DType.FP32)));
                    }
                    DeviceMemory gone = DeviceMemory.allocate(DType.FP32, 999);
                    DeviceTensor freedHere = gone.tensor(DType.FP32);
                    gone.close();
                    IllegalStateException refused = assertThrows(IllegalStateException.class,
                            () -> tx.allReduce(freedHere, ReduceOp.SUM));
                    assertTrue(refused.getMessage().startsWith("allReduce: tensor ") && refused.getMessage()
                            .contains("was closed"), refused.getMessage());
                    assertEquals(0, tx.size(), "rejected commands must not be buffered");
                    checked.add("transaction");
                }
                expect(IllegalStateException.class, "send: transaction #2 of rank 0 was closed without executing", () -> {
                    Transaction discarded = comm.begin(event);
                    discarded.close();
                    discarded.send(shard, 1);
                });
                expect(IllegalArgumentException.class, "allReduce: BYTE tensors cannot be reduced (MAX); use a numeric type",
                        () -> comm.allReduce(new DeviceTensor(memory.address(), DType.BYTE, 3), ReduceOp.MAX, stream));
                expect(IllegalArgumentException.class, "reduceNormSquared: expected one FP32 element, got 2 x FP32",
                        () -> comm.reduceNormSquared(shard.slice(0, 2), stream));
                expect(IllegalArgumentException.class, "gatherBytesHost: root 3 out of range [0, 3)",
                        () -> comm.gatherBytesHost(new byte[1], 3));
                CudaStream closed = CudaStream.create();
                closed.close();
                expect(IllegalStateException.class, "allReduce: stream " + closed + " is closed",
                        () -> comm.allReduce(shard, ReduceOp.SUM, closed));
                CudaStream elsewhere = CudaStream.wrap(stream.handle(), 2);
                expect(IllegalArgumentException.class,
                        "waitOnComms: stream is on device 2, the communicator of rank 0 on device 0",
                        () -> comm.waitOnComms(elsewhere));
                CudaEvent closedEvent = CudaEvent.create();
                closedEvent.close();
                expect(IllegalStateException.class, "begin: ready event " + closedEvent + " is closed",
                        () -> comm.begin(closedEvent));
                checked.add("convenience");
            }
            comm.barrier();
            return checked;
        });
        LocalRanks.rethrowAny(results);
        assertEquals(List.of("transaction", "convenience"), results.get(0));
    }

    @Test
    void executeTwiceAndUseAfterExecute() throws Throwable {
        try (Communicator comm = Communicator.single(0); CudaStream stream = CudaStream.create();
             DeviceMemory memory = DeviceMemory.allocate(DType.INT32, 8)) {
            Transaction tx = comm.begin(stream);
            tx.execute(null);
            expect(IllegalStateException.class, "execute: transaction #1 of rank 0 was already executed",
                    () -> tx.execute(null));
            expect(IllegalStateException.class, "reduceScatter: transaction #1 of rank 0 was already executed",
                    () -> tx.reduceScatter(memory.tensor(DType.INT32)));
            tx.close(); // closing after execute does nothing
            try (Transaction next = comm.begin(stream)) {
                assertEquals(2, next.number());
            }
        }
    }

    @Test
    void abortedCommunicatorSaysWhy() {
        try (Communicator comm = Communicator.single(0); CudaStream stream = CudaStream.create()) {
            comm.abort("test: giving up");
            assertTrue(comm.isAborted());
            CommunicatorAbortedException e = assertThrows(CommunicatorAbortedException.class, () -> comm.begin(stream));
            assertEquals("begin: communicator of rank 0 was aborted: test: giving up", e.getMessage());
            assertThrows(CommunicatorAbortedException.class, comm::barrier);
            comm.abort("second reason is ignored");
            assertEquals("test: giving up", comm.abortReason());
        }
    }
}
