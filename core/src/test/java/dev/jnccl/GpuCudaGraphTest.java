package dev.jnccl;

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
        Gpus.assumeCuda();
        super.open();
    }
}
