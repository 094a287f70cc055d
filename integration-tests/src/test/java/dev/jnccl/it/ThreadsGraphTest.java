package dev.jnccl.it;

import dev.jnccl.threads.ThreadsOptions;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Threads mode and CUDA graphs: every rank captures steps of 1, 8 and 32 transactions and replays
 * them through {@code Communicator.launch}, against the eager steps ({@link GraphScenarios}), over
 * NCCL; with threads mode's copy-engine transport a capture is refused.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsGraphTest {

    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {2, 3, 4})
    void capturedStepsReplayAsTheEagerOnes(int world) {
        Packs.run(world, ThreadsOptions.defaults(), GraphScenarios::capturedSteps);
    }

    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {2, 3})
    void capturedTransactionsAreNotPacedAsIfTheyRan(int world) {
        Packs.run(world, ThreadsOptions.defaults().withMaxLead(1), GraphScenarios::capturesOfRanksAtDifferentTimes);
    }

    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {2, 3})
    void theCopyEngineTransportRefusesACapture(int world) {
        Packs.run(world, ThreadsOptions.defaults().withMemcpyAllGather(true).withMemcpySendRecv(true),
                GraphScenarios::copyEngineRefusesCaptures);
    }
}
