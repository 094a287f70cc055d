package dev.jnccl.it;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.Backend;
import dev.jnccl.JncclRuntime;
import dev.jnccl.it.Packs.Mode;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Threads mode on a real GPU with real NCCL (the H200): world 1 through
 * {@link dev.jnccl.threads.ThreadsCommunicators}, with each combination of the memcpy transports:
 * every transaction command, a mixed transaction, every convenience operation, the host helpers
 * and overlap with a compute stream, the out-of-place, rooted and uneven collectives
 * ({@link CollectiveScenarios}: ncclReduce, ncclGather and ncclScatter where NCCL has them), checked element by element (with one rank every reduction is
 * the identity up to NCCL's arithmetic, so the references are exact). Skipped, with the reason,
 * unless the backend is {@code cuda}.
 */
@Tag("gpu")
@Timeout(value = 180, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class GpuThreadsWorldOneTest {

    @BeforeEach
    void requireCuda() {
        String backend;
        try {
            backend = JncclRuntime.query().backend().toString();
        } catch (RuntimeException e) {
            backend = "unavailable (" + e.getMessage() + ")";
        }
        assumeTrue(backend.equals(Backend.CUDA.toString()), "backend resolved to " + backend
                + "; this test needs a CUDA device and jnccl.backend=cuda or auto");
    }

    @ParameterizedTest(name = "world 1, {0}")
    @MethodSource("dev.jnccl.it.Packs$Mode#all")
    void everyOperationOnOneGpu(Mode mode) {
        Packs.run(1, mode.options(), Duration.ofSeconds(120), c -> {
            Scenarios.transactionCommands(c);
            Scenarios.mixedTransaction(c);
            Scenarios.sendOnly(c);
            Scenarios.convenienceOperations(c);
            Scenarios.hostHelpers(c);
            Scenarios.overlapWithCompute(c, c.newStream());
            CollectiveScenarios.outOfPlaceReductions(c);
            CollectiveScenarios.reduceToEveryRoot(c);
            CollectiveScenarios.gatherAndScatterOfEveryDtype(c);
            CollectiveScenarios.unevenAllToAllOfEveryDtype(c);
            CollectiveScenarios.unevenAllGatherOfEveryDtype(c);
        });
    }
}
