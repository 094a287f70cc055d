package dev.jnccl;

import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaException;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.spi.Command;
import dev.jnccl.spi.RankParts;
import dev.jnccl.spi.Transport;
import dev.jnccl.testsupport.NativeEnv;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CyclicBarrier;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The C++ original's lifecycle and ordering bugs, each with a test that fails on the old
 * behaviour, and the deadlines that keep jnccl from hanging. Uses the host emulation's fault
 * injection and delays, so it runs on the host backend only.
 */
class ReliabilityTest {

    @BeforeEach
    void hostOnly() {
        Backend backend = JncclRuntime.query().backend();
        assumeTrue(backend == Backend.HOST, "needs the host emulation's fault injection (backend is " + backend + ")");
    }

    @Test
    void emptyTransactionOrdersSignalAfterReady() {
        try (Communicator comm = Communicator.single(0)) {
            CudaStream slow;
            try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_DELAY_US", "300000")) {
                slow = CudaStream.create(); // every operation of this stream takes 300 ms
            }
            try (slow; DeviceMemory memory = DeviceMemory.allocate(64); CudaEvent ready = CudaEvent.create();
                 CudaEvent signal = CudaEvent.create()) {
                memory.fill((byte) 1, slow);
                slow.record(ready);
                try (Transaction tx = comm.begin(ready)) {
                    tx.execute(signal);
                }
                // The original recorded the signal without waiting for ready when nothing was enqueued.
                assertFalse(signal.isComplete(), "signal fired before the ready event");
                comm.await(signal);
                assertTrue(ready.isComplete(), "signal completed while ready was still pending");
            }
        }
    }

    @Test
    void waitOnCommsWaitsForTheCommsStreamNotTheCallersStream() {
        CommunicatorOptions options = CommunicatorOptions.defaults();
        Random random = new Random();
        int count = 4096;
        try (Arena arena = Arena.ofConfined()) {
            Communicator comm;
            try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_DELAY_US", "200000")) {
                comm = Communicator.single(0, options); // its comms stream is slow
            }
            try (comm; CudaStream user = CudaStream.create();
                 DeviceMemory shard = DeviceMemory.allocate(DType.INT32, count);
                 DeviceMemory full = DeviceMemory.allocate(DType.INT32, count);
                 DeviceMemory copy = DeviceMemory.allocate(DType.INT32, count)) {
                MemorySegment data = TestData.random(arena, DType.INT32, count, random);
                shard.copyFromHost(data);
                full.fill((byte) 0x5a, user);
                user.synchronize();
                try (Transaction tx = comm.begin(user)) {
                    tx.allGather(shard.tensor(DType.INT32), full.tensor(DType.INT32));
                    tx.execute(null);
                }
                comm.waitOnComms(user);
                user.copyAsync(full.tensor(DType.INT32), copy.tensor(DType.INT32));
                user.synchronize();
                MemorySegment result = arena.allocate(copy.bytes());
                copy.copyToHost(result);
                assertArrayEquals(data.toArray(JAVA_INT), result.toArray(JAVA_INT),
                        "the user stream read the gather's target before the comms stream wrote it");
            }
        }
    }

    /** A world-1 communicator whose all-gather transport fails after NCCL calls were made in the group. */
    private static Communicator failingGather() {
        Transport failing = (command, stream) -> {
            if (command.kind() == Command.Kind.ALL_GATHER) {
                throw new IllegalStateException("transport failed");
            }
            return false;
        };
        byte[][] slots = new byte[1][];
        return LocalRanks.create(UniqueId.generate(), 0, 1, 0, CommunicatorOptions.defaults(),
                new RankParts(new LocalRanks.TestHost(0, new CyclicBarrier(1), slots), failing), false);
    }

    @Test
    void failureInsideExecuteClosesTheGroupClearsTheBufferAndAborts() {
        try (Communicator failing = failingGather(); Communicator healthy = Communicator.single(0);
             CudaStream stream = CudaStream.create(); DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 64)) {
            Transaction tx = failing.begin(stream);
            // The all-reduce is enqueued into the open NCCL group before the transport fails.
            tx.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM);
            tx.allGather(memory.tensor(DType.FP32), memory.tensor(DType.FP32));
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> tx.execute(null));
            assertEquals("transport failed", e.getMessage());
            assertEquals(0, tx.size(), "the command buffer was left full");
            assertTrue(failing.isAborted());
            assertTrue(failing.abortReason().contains("execute of transaction #1 failed: transport failed"));
            // Had the NCCL group been left open on this thread, this all-reduce would be deferred
            // forever instead of running.
            healthy.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM, stream);
            long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
            while (!healthy.stream().isIdle()) {
                assertTrue(System.nanoTime() < deadline, "all-reduce never ran: the NCCL group was left open");
                Thread.onSpinWait();
            }
        }
    }

    @Test
    void initGivesUpAtTheDeadlineWhenPeersNeverJoin() {
        CommunicatorOptions options = CommunicatorOptions.defaults().withInitTimeout(Duration.ofSeconds(1));
        CommunicatorAbortedException e = assertTimeoutPreemptively(Duration.ofSeconds(20), () -> assertThrows(
                CommunicatorAbortedException.class, () -> LocalRanks.create(UniqueId.generate(), 0, 2, 0,
                        options, new java.util.concurrent.CyclicBarrier(2), new byte[2][])));
        assertEquals("init: rank 0 of 2 (device 0) aborted after waiting 1000 ms for the other ranks to join"
                + " (CommunicatorOptions.initTimeout)", e.getMessage());
    }

    @Test
    void duplicateDeviceIsAnNcclExceptionWithNcclsText() throws Exception {
        List<Object> results = LocalRanksOnOneDevice.run(2);
        for (Object result : results) {
            NcclException e = assertInstanceOf(NcclException.class, result);
            assertEquals("ncclCommInitRankConfig", e.function());
            assertEquals(5, e.result()); // ncclInvalidUsage
            assertEquals(0, e.device());
            assertFalse(e.resultText().isBlank());
        }
    }

    /** Two ranks that both (wrongly) use device 0. */
    static final class LocalRanksOnOneDevice {
        static List<Object> run(int world) throws Exception {
            UniqueId id = UniqueId.generate();
            java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(world);
            try {
                List<java.util.concurrent.Future<Object>> futures = new java.util.ArrayList<>();
                for (int rank = 0; rank < world; rank++) {
                    int r = rank;
                    futures.add(pool.submit(() -> {
                        try (Communicator ignored = LocalRanks.create(id, r, world, 0,
                                CommunicatorOptions.defaults().withInitTimeout(Duration.ofSeconds(10)),
                                new java.util.concurrent.CyclicBarrier(world), new byte[world][])) {
                            return (Object) "created";
                        } catch (Throwable t) {
                            return t;
                        }
                    }));
                }
                List<Object> results = new java.util.ArrayList<>();
                for (var f : futures) {
                    results.add(f.get(30, java.util.concurrent.TimeUnit.SECONDS));
                }
                return results;
            } finally {
                pool.shutdownNow();
            }
        }
    }

    @Test
    void cudaErrorsCarryFunctionCodeAndText() {
        CudaException e = assertThrows(CudaException.class, () -> DeviceMemory.allocate(1L << 60));
        assertEquals(2, e.code()); // cudaErrorMemoryAllocation
        assertTrue(e.function().startsWith("cudaMalloc"), e.function());
        assertFalse(e.text().isBlank());
    }

    @Test
    void watchdogAbortsAHungCollectiveAndEveryWaiterGetsAbortedException() throws Throwable {
        CommunicatorOptions options = CommunicatorOptions.defaults().withWatchdog(Duration.ofSeconds(1))
                .withWatchdogInterval(Duration.ofMillis(50)).withCloseTimeout(Duration.ofSeconds(2));
        List<Object> results;
        long started = System.nanoTime();
        try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_FAULT", "hang", "JNCCL_HOST_FAULT_RANK", "1",
                "JNCCL_HOST_FAULT_AT", "2")) {
            results = LocalRanks.run(2, options, comm -> {
                try (CudaStream stream = CudaStream.create(); DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 1024);
                     CudaEvent signal = CudaEvent.create()) {
                    for (int i = 0; i < 3; i++) {
                        try (Transaction tx = comm.begin(stream)) {
                            tx.reduceScatter(memory.tensor(DType.FP32));
                            tx.execute(signal);
                        }
                        comm.await(signal);
                    }
                    return "completed";
                }
            });
        }
        long seconds = Duration.ofNanos(System.nanoTime() - started).toSeconds();
        assertTrue(seconds < 10, "took " + seconds + " s");
        // Both ranks' watchdogs run against the same hang; the rank whose watchdog fires second may
        // first see the other's abort (NCCL remote error "rank r aborted"): also a right outcome.
        boolean anyWatchdog = false;
        for (Object result : results) {
            CommunicatorAbortedException e = assertInstanceOf(CommunicatorAbortedException.class, result);
            anyWatchdog |= e.getMessage().contains("watchdog");
            assertTrue(e.getMessage().contains("watchdog") || e.getMessage().matches("(?s).*rank [01] aborted.*"),
                    e.getMessage());
        }
        assertTrue(anyWatchdog, "no rank was aborted by its watchdog: " + results);
    }

    /**
     * Rank 1 takes part in split's host exchange but never calls NCCL's split: rank 0 gives up at
     * its init deadline with CommunicatorAbortedException, aborted (so its peers learn of it), not hung.
     */
    @Test
    void splitGivesUpAtTheDeadlineWhenAPeerNeverSplits() throws Throwable {
        CommunicatorOptions options = CommunicatorOptions.defaults().withInitTimeout(Duration.ofSeconds(1))
                .withCloseTimeout(Duration.ofSeconds(2));
        long started = System.nanoTime();
        java.util.concurrent.CountDownLatch rankZeroDone = new java.util.concurrent.CountDownLatch(1);
        List<Object> results = LocalRanks.run(2, options, comm -> {
            if (comm.rank() == 1) {
                comm.allGatherBytesHost(new byte[8]); // split's exchange of color and key, nothing more
                try {
                    // Stay (not closing) until rank 0 has given up: then nothing of rank 1 can help it.
                    return rankZeroDone.await(20, java.util.concurrent.TimeUnit.SECONDS) ? "bystander" : "rank 0 hung";
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            }
            try {
                comm.split(0, 0);
                return "split returned";
            } catch (CommunicatorAbortedException e) {
                long millis = Duration.ofNanos(System.nanoTime() - started).toMillis();
                return e.getMessage() + " | aborted " + comm.isAborted() + " | after " + millis + " ms";
            } finally {
                rankZeroDone.countDown();
            }
        });
        LocalRanks.rethrowAny(results);
        assertEquals("bystander", results.get(1));
        String outcome = (String) results.getFirst();
        assertTrue(outcome.contains("waiting 1000 ms for the other ranks to call split (CommunicatorOptions.initTimeout)")
                && outcome.contains("| aborted true |"), outcome);
        long millis = Long.parseLong(outcome.replaceAll(".*after (\\d+) ms$", "$1"));
        assertTrue(millis >= 1000 && millis < 6000, outcome);
    }

    @Test
    void watchdogReportsAsynchronousErrors() throws Throwable {
        CommunicatorOptions options = CommunicatorOptions.defaults().withWatchdog(Duration.ofSeconds(5))
                .withWatchdogInterval(Duration.ofMillis(50));
        List<Object> results;
        try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_FAULT", "fail", "JNCCL_HOST_FAULT_RANK", "0",
                "JNCCL_HOST_FAULT_AT", "1")) {
            results = LocalRanks.run(1, options, comm -> {
                try (CudaStream stream = CudaStream.create(); DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 64)) {
                    comm.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM, stream);
                    long deadline = System.nanoTime() + Duration.ofSeconds(5).toNanos();
                    while (!comm.isAborted() && System.nanoTime() < deadline) {
                        Thread.onSpinWait();
                    }
                    return comm.abortReason();
                }
            });
        }
        String reason = (String) results.getFirst();
        assertTrue(reason != null && reason.contains("asynchronous error"), String.valueOf(reason));
    }

    @Test
    void closeIsBoundedWhenTheCommsStreamIsStuck() throws Throwable {
        CommunicatorOptions options = CommunicatorOptions.defaults().withCloseTimeout(Duration.ofSeconds(1));
        try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_FAULT", "hang", "JNCCL_HOST_FAULT_RANK", "0",
                "JNCCL_HOST_FAULT_AT", "1")) {
            List<Object> results = LocalRanks.run(1, options, comm -> {
                try (CudaStream stream = CudaStream.create(); DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 64)) {
                    comm.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM, stream);
                    long started = System.nanoTime();
                    comm.close();
                    return Duration.ofNanos(System.nanoTime() - started);
                }
            });
            LocalRanks.rethrowAny(results);
            Duration took = (Duration) results.getFirst();
            assertTrue(took.toMillis() < 5000, "close took " + took);
        }
    }
}
