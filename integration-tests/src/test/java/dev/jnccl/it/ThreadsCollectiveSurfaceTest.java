package dev.jnccl.it;

import dev.jnccl.it.Packs.Mode;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Threads mode, worlds 1 to 8: the out-of-place all-reduce, reduce-scatter and broadcast, reduce
 * to every root, gather and scatter (non-roots without buffers, in place on the root) and the
 * uneven all-to-all, with NCCL and with the memcpy transports (which leave these commands to
 * NCCL, next to the sends and receives they move themselves), against Java references element by
 * element ({@link CollectiveScenarios}).
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsCollectiveSurfaceTest {

    /** Worlds 1 to 8, NCCL only and every memcpy transport on. */
    static Stream<Arguments> matrix() {
        List<Arguments> cases = new ArrayList<>();
        for (int world = 1; world <= 8; world++) {
            cases.add(Arguments.of(world, new Mode(false, false)));
            cases.add(Arguments.of(world, new Mode(true, true)));
        }
        return cases.stream();
    }

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("matrix")
    void outOfPlaceReductionsMatchTheReference(int world, Mode mode) {
        Packs.run(world, mode.options(), CollectiveScenarios::outOfPlaceReductions);
    }

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("matrix")
    void reduceToEveryRootMatchesTheReference(int world, Mode mode) {
        Packs.run(world, mode.options(), CollectiveScenarios::reduceToEveryRoot);
    }

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("matrix")
    void gatherAndScatterOfEveryDtypeMatchTheReference(int world, Mode mode) {
        Packs.run(world, mode.options(), CollectiveScenarios::gatherAndScatterOfEveryDtype);
    }

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("matrix")
    void unevenAllToAllOfEveryDtypeMatchesTheReference(int world, Mode mode) {
        Packs.run(world, mode.options(), CollectiveScenarios::unevenAllToAllOfEveryDtype);
    }

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("matrix")
    void unevenAllGatherOfEveryDtypeMatchesTheReference(int world, Mode mode) {
        Packs.run(world, mode.options(), CollectiveScenarios::unevenAllGatherOfEveryDtype);
    }
}
