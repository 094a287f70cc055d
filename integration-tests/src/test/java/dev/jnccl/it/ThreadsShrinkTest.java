package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.Communicator;
import dev.jnccl.DType;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * The threads host side's shrink: in a pack of 4 rank 3 stays alive but never calls jnccl again;
 * the other three shrink without it (the survivors' pack never waits for rank 3) by either path,
 * with NCCL's or the copy engines' all-gather, and run checked collectives; the pack then ends
 * normally. On the emulation in the build; on real NCCL in the GPU machine's threads multi-rank
 * suite (ranks sharing the GPU, {@link Packs#placed}).
 */
@Timeout(120)
class ThreadsShrinkTest {
    private static final int COUNT = 2 * 3 * 61;

    @AfterEach
    void clearPathSetting() {
        System.clearProperty("jnccl.shrink.path");
    }

    @ParameterizedTest
    @CsvSource({"reinit, false", "auto, false", "nccl, false", "reinit, true", "nccl, true"})
    void survivorsShrinkWithoutARankThatNeverCalls(String path, boolean memcpy) {
        System.setProperty("jnccl.shrink.path", path);
        long seed = new Random().nextLong();
        CountDownLatch survivorsDone = new CountDownLatch(3);
        ThreadsOptions options = Packs.placed(4, ThreadsOptions.defaults().withMemcpyAllGather(memcpy));
        ThreadsCommunicators.run(4, options, comm -> {
            if (comm.rank() == 3) {
                await(survivorsDone); // alive, never calling jnccl, until the survivors are done
                return;
            }
            try {
                Communicator survivors = comm.shrink(3);
                assertEquals(comm.rank(), survivors.rank(), "old ranks 0-2 keep their order");
                assertEquals(3, survivors.worldSize());
                checkAllReduceAndAllGather(survivors, seed);
                survivors.barrier();
            } finally {
                survivorsDone.countDown();
            }
        });
    }

    /** A sum of random longs and an all-gather of random longs, checked element by element. */
    private static void checkAllReduceAndAllGather(Communicator comm, long seed) {
        int world = comm.worldSize();
        try (CudaStream stream = CudaStream.create();
             DeviceMemory sum = DeviceMemory.allocate(DType.INT64, COUNT);
             DeviceMemory full = DeviceMemory.allocate(DType.INT64, COUNT)) {
            sum.copyFromHost(MemorySegment.ofArray(values(seed, comm.rank(), COUNT)));
            long[] shard = values(seed + 1, comm.rank(), COUNT / world);
            full.copyFromHost(MemorySegment.ofArray(shard), (long) comm.rank() * shard.length * Long.BYTES);
            comm.allReduce(sum.tensor(DType.INT64), ReduceOp.SUM, stream);
            comm.allGather(full.tensor(DType.INT64).shard(comm.rank(), world), full.tensor(DType.INT64), stream);
            stream.synchronize();
            long[] summed = new long[COUNT];
            long[] gathered = new long[COUNT];
            sum.copyToHost(MemorySegment.ofArray(summed));
            full.copyToHost(MemorySegment.ofArray(gathered));
            long[] expected = new long[COUNT];
            for (int r = 0; r < world; r++) {
                long[] part = values(seed, r, COUNT);
                long[] block = values(seed + 1, r, COUNT / world);
                for (int i = 0; i < COUNT; i++) {
                    expected[i] += part[i];
                }
                for (int i = 0; i < block.length; i++) {
                    assertEquals(block[i], gathered[r * block.length + i], "all-gather block " + r + " element " + i);
                }
            }
            for (int i = 0; i < COUNT; i++) {
                assertEquals(expected[i], summed[i], "all-reduce element " + i);
            }
        }
    }

    private static long[] values(long seed, int rank, int count) {
        return new Random(seed * 31 + rank).longs(count).toArray();
    }

    private static void await(CountDownLatch latch) {
        try {
            assertTrue(latch.await(60, TimeUnit.SECONDS), "the survivors finished");
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }
}
