package dev.jnccl;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;

/**
 * {@link CudaGraphTest} on a real GPU with real CUDA and NCCL: copies, a fill and world-1
 * transactions captured and replayed (steps of 1, 8 and 32 transactions through
 * {@code Communicator.launch} against the eager ones, a ready event recorded outside the capture),
 * and the refused calls; skipped, with the reason, elsewhere (the hung-replay case needs the emulation).
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
