package dev.jnccl.consumer;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import dev.jnccl.Communicator;
import dev.jnccl.DType;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.junit.MultiRankTest;
import dev.jnccl.junit.RankInfo;
import java.lang.foreign.MemorySegment;
import java.util.SplittableRandom;

/** A user's multi-rank test through jnccl-junit (the README's "Testing your code with jnccl"). */
class MultiRankConsumerTest {
    private static final long SEED = System.nanoTime();

    /** Rank r's gradients: random, reproducible from the seed by every rank. */
    private static int[] gradients(int rank, int count) {
        return new SplittableRandom(SEED + rank).ints(count, -1000, 1000).toArray();
    }

    @MultiRankTest(worlds = {1, 2, 4})
    void allReduceSumsEveryRanksGradients(Communicator comm, RankInfo me) {
        int count = 4096;
        int[] expected = new int[count];
        for (int r = 0; r < me.world(); r++) {
            int[] theirs = gradients(r, count);
            for (int i = 0; i < count; i++) {
                expected[i] += theirs[i];
            }
        }
        try (DeviceMemory memory = DeviceMemory.allocate(DType.INT32, count);
             CudaStream stream = CudaStream.create()) {
            memory.copyFromHost(MemorySegment.ofArray(gradients(me.rank(), count)));
            comm.allReduce(memory.tensor(DType.INT32), ReduceOp.SUM, stream);
            comm.synchronize();
            int[] actual = new int[count];
            memory.copyToHost(MemorySegment.ofArray(actual));
            assertArrayEquals(expected, actual, "rank " + me.rank() + " of " + me.world() + ", seed " + SEED);
        }
    }
}
