package dev.jnccl;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;

/** {@link CommunicatorWorldOneTest} on a real GPU with real NCCL; skipped, with the reason, elsewhere. */
@Tag("gpu")
class GpuCommunicatorWorldOneTest extends CommunicatorWorldOneTest {

    @BeforeEach
    @Override
    void open() {
        Gpus.assumeCuda();
        super.open();
    }
}
