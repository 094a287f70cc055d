package dev.jnccl.it;

import dev.jnccl.CommunicatorMode;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The multi-process lifecycle checks (see {@link MultiProcessWorlds}) at W = 2 and 4,
 * for the backend of the concrete class.
 */
abstract class MultiProcessLifecycleChecks {

    /** The worlds of the backend under test. */
    abstract MultiProcessWorlds worlds();

    @ParameterizedTest(name = "W = {0}")
    @ValueSource(ints = {2, 4})
    void everyOperationInBothModes(int world) throws Exception {
        worlds().everyOperationInBothModes(world);
    }

    @ParameterizedTest(name = "W = {0}")
    @ValueSource(ints = {2, 4})
    void initEndsAtTheDeadlineWhenARankNeverJoins(int world) throws Exception {
        worlds().rankThatNeverJoins(world);
    }

    @ParameterizedTest(name = "W = {0}, {1}")
    @CsvSource({"2, BLOCKING_SPLIT", "2, NON_BLOCKING", "4, BLOCKING_SPLIT", "4, NON_BLOCKING"})
    void watchdogAbortsWhenARankIsKilled(int world, CommunicatorMode mode) throws Exception {
        worlds().killedRank(world, mode);
    }
}
