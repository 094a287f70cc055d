package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.threads.ThreadsOptions;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Threads mode, worlds 1 to 4: pre-multiplied sums of each type family in all-reduce and
 * reduce-scatter against NCCL's ring arithmetic, collectives on ncclMemAlloc memory registered
 * with the communicator ({@link BufferScenarios}), and the ncclConfig_t tuning options carried to
 * split communicators, whose scaled sums use operators of their own NCCL communicator.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsBuffersTest {

    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {1, 2, 3, 4})
    void scaledSumsOfEveryTypeFamily(int world) {
        Packs.run(world, ThreadsOptions.defaults(), BufferScenarios::scaledSums);
    }

    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {1, 2, 3, 4})
    void collectivesOnRegisteredNcclMemory(int world) {
        Packs.run(world, ThreadsOptions.defaults(), BufferScenarios::registeredNcclMemory);
    }

    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {2, 4})
    void tuningReachesSplitCommunicators(int world) {
        CommunicatorOptions tuned = CommunicatorOptions.defaults().withCTAs(2, 16).withCgaClusterSize(1)
                .withName("jnccl-buffers-test");
        Packs.run(world, ThreadsOptions.defaults().withCommunicator(tuned), c -> {
            assertEquals(tuned, c.comm.options());
            Optional<Communicator> half = c.comm.split(c.rank % 2, c.rank);
            assertTrue(half.isPresent());
            try (Communicator child = half.get()) {
                assertEquals(tuned, child.options(), "the split's options");
                // A scaled sum on the child: its own NCCL communicator, its own operator.
                float[] mine = new float[64];
                for (int i = 0; i < mine.length; i++) {
                    mine[i] = (c.rank + 1) * 0.25f + i;
                }
                DeviceTensor t = c.upload(mine);
                child.allReduce(t, ReduceOp.scaledSum(0.5), c.compute());
                c.compute().synchronize();
                float[] got = c.floats(t);
                for (int i = 0; i < mine.length; i++) {
                    float want = 0;
                    for (int r = c.rank % 2; r < world; r += 2) {
                        want += ((r + 1) * 0.25f + i) * 0.5f; // exact: few bits, no rounding anywhere
                    }
                    assertEquals(want, got[i], c.what("split allReduce " + ReduceOp.scaledSum(0.5) + " element " + i));
                }
            }
        });
    }
}
