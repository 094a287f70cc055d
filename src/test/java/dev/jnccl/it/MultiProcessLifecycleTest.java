package dev.jnccl.it;

import dev.jnccl.CommunicatorMode;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Ranks as processes on the host emulation (its rendezvous is POSIX shared memory, so it works
 * across processes): W = 2 and 4 child JVMs, both communicator modes. See {@link MultiProcessWorlds}.
 */
@Timeout(value = 600, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class MultiProcessLifecycleTest {
    private final MultiProcessWorlds worlds = new MultiProcessWorlds("host", Map.of());

    @ParameterizedTest(name = "W = {0}")
    @ValueSource(ints = {2, 4})
    void everyOperationInBothModes(int world) throws Exception {
        worlds.everyOperationInBothModes(world);
    }

    @ParameterizedTest(name = "W = {0}")
    @ValueSource(ints = {2, 4})
    void initEndsAtTheDeadlineWhenARankNeverJoins(int world) throws Exception {
        worlds.rankThatNeverJoins(world);
    }

    @ParameterizedTest(name = "W = {0}, {1}")
    @CsvSource({"2, BLOCKING_SPLIT", "2, NON_BLOCKING", "4, BLOCKING_SPLIT", "4, NON_BLOCKING"})
    void watchdogAbortsWhenARankIsKilled(int world, CommunicatorMode mode) throws Exception {
        worlds.killedRank(world, mode);
    }
}
