package dev.jnccl;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;

/**
 * {@link CudaGraphTest} on a real GPU with real CUDA and NCCL: copies, a fill and a world-1
 * transaction captured and replayed, and the refused calls; skipped, with the reason, elsewhere.
 */
@Tag("gpu")
class GpuCudaGraphTest extends CudaGraphTest {

    @BeforeEach
    @Override
    void open() {
        Backend backend = JncclRuntime.query().backend();
        assumeTrue(backend == Backend.CUDA, "backend resolved to " + backend
                + " (no CUDA device visible); this test needs a GPU and jnccl.backend=cuda or auto");
        super.open();
    }
}
