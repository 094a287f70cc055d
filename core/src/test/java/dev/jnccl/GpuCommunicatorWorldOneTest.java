package dev.jnccl;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.internal.Native;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;

/** {@link CommunicatorWorldOneTest} on a real GPU with real NCCL; skipped, with the reason, elsewhere. */
@Tag("gpu")
class GpuCommunicatorWorldOneTest extends CommunicatorWorldOneTest {

    @BeforeEach
    @Override
    void open() {
        String backend = Native.libraries().backend().id();
        assumeTrue(backend.equals("cuda"), "backend resolved to " + backend
                + " (no CUDA device visible); this test needs a GPU and jnccl.backend=cuda or auto");
        super.open();
    }
}
