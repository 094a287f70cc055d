package dev.jnccl;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;

/**
 * {@link BuffersWorldOneTest} on a real GPU with real NCCL (pre-multiplied sums, ncclMemAlloc,
 * ncclCommRegister); skipped, with the reason, elsewhere.
 */
@Tag("gpu")
class GpuBuffersWorldOneTest extends BuffersWorldOneTest {

    @BeforeEach
    @Override
    void open() {
        Backend backend = JncclRuntime.query().backend();
        assumeTrue(backend == Backend.CUDA, "backend resolved to " + backend
                + " (no CUDA device visible); this test needs a GPU and jnccl.backend=cuda or auto");
        super.open();
    }
}
