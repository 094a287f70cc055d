package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.testsupport.NativeEnv;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Both {@link CommunicatorMode}s with ranks as threads of this JVM: results element by element,
 * bounded init when a rank never comes, watchdog abort of a hung collective, bounded close.
 * (Ranks as processes: the integration tests' MultiProcessLifecycleTest.)
 */
@Timeout(120)
class CommunicatorModeTest {
    private static final int COUNT = 3 * 257;

    @ParameterizedTest
    @EnumSource(CommunicatorMode.class)
    void transactionAndAllReduceAreExactInEachMode(CommunicatorMode mode) throws Throwable {
        int world = 3;
        long seed = new Random().nextLong();
        CommunicatorOptions options = CommunicatorOptions.defaults().withMode(mode);
        List<Object> results = LocalRanks.run(world, options, comm -> {
            assertEquals(mode, comm.options().mode());
            try (Arena arena = Arena.ofConfined(); CudaStream stream = CudaStream.create();
                 DeviceMemory grads = DeviceMemory.allocate(DType.INT32, COUNT);
                 DeviceMemory reduced = DeviceMemory.allocate(DType.INT32, COUNT);
                 CudaEvent signal = CudaEvent.create()) {
                grads.copyFromHost(values(arena, seed, comm.rank()));
                reduced.copyFromHost(values(arena, seed + 1, comm.rank()));
                try (Transaction tx = comm.begin(stream)) {
                    // reduce-scatter, then all-gather of the reduced shards: an all-reduce in two steps
                    tx.reduceScatter(grads.tensor(DType.INT32));
                    tx.execute(null);
                }
                try (Transaction tx = comm.begin(stream)) {
                    DeviceTensor full = grads.tensor(DType.INT32);
                    tx.allGather(full.shard(comm.rank(), world), full);
                    tx.execute(signal);
                }
                comm.await(signal);
                comm.allReduce(reduced.tensor(DType.INT32), ReduceOp.SUM, stream);
                stream.synchronize();
                MemorySegment first = arena.allocate(4L * COUNT);
                MemorySegment second = arena.allocate(4L * COUNT);
                grads.copyToHost(first);
                reduced.copyToHost(second);
                for (int i = 0; i < COUNT; i++) {
                    int want1 = 0;
                    int want2 = 0;
                    for (int r = 0; r < world; r++) {
                        want1 += values(arena, seed, r).getAtIndex(ValueLayout.JAVA_INT, i);
                        want2 += values(arena, seed + 1, r).getAtIndex(ValueLayout.JAVA_INT, i);
                    }
                    assertEquals(want1, first.getAtIndex(ValueLayout.JAVA_INT, i), "transaction element " + i);
                    assertEquals(want2, second.getAtIndex(ValueLayout.JAVA_INT, i), "allReduce element " + i);
                }
                return "ok";
            }
        });
        LocalRanks.rethrowAny(results);
    }

    @ParameterizedTest
    @EnumSource(CommunicatorMode.class)
    void initEndsAtTheDeadlineWhenARankNeverJoins(CommunicatorMode mode) {
        CommunicatorOptions options = CommunicatorOptions.defaults().withMode(mode)
                .withInitTimeout(Duration.ofMillis(700));
        long started = System.nanoTime();
        CommunicatorAbortedException e = assertThrows(CommunicatorAbortedException.class,
                () -> LocalRanks.create(UniqueId.generate(), 0, 2, 0, options, null, null));
        long millis = Duration.ofNanos(System.nanoTime() - started).toMillis();
        assertTrue(e.getMessage().contains("initTimeout"), e.getMessage());
        assertTrue(millis >= 600 && millis < 10_000, "init ended after " + millis + " ms");
    }

    @ParameterizedTest
    @EnumSource(CommunicatorMode.class)
    void watchdogEndsAHungCollectiveAndCloseIsBounded(CommunicatorMode mode) throws Throwable {
        CommunicatorOptions options = CommunicatorOptions.defaults().withMode(mode)
                .withWatchdog(Duration.ofMillis(500)).withWatchdogInterval(Duration.ofMillis(20))
                .withCloseTimeout(Duration.ofSeconds(2));
        List<Object> results;
        try (NativeEnv env = NativeEnv.set("JNCCL_HOST_FAULT", "hang", "JNCCL_HOST_FAULT_RANK", "1",
                "JNCCL_HOST_FAULT_AT", "1")) {
            results = LocalRanks.run(2, options, comm -> {
                try (CudaStream stream = CudaStream.create(); DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 64);
                     CudaEvent signal = CudaEvent.create()) {
                    try (Transaction tx = comm.begin(stream)) {
                        tx.reduceScatter(memory.tensor(DType.FP32));
                        tx.execute(signal);
                    }
                    comm.await(signal);
                    return "completed";
                }
            });
        }
        for (Object result : results) {
            CommunicatorAbortedException e = assertInstanceOf(CommunicatorAbortedException.class, result);
            assertTrue(e.getMessage().contains("watchdog") || e.getMessage().contains("rank"), e.getMessage());
        }
    }

    private static MemorySegment values(Arena arena, long seed, int rank) {
        Random random = new Random(seed * 31 + rank);
        MemorySegment data = arena.allocate(4L * COUNT);
        for (int i = 0; i < COUNT; i++) {
            data.setAtIndex(ValueLayout.JAVA_INT, i, random.nextInt(1 << 20) - (1 << 19));
        }
        return data;
    }
}
