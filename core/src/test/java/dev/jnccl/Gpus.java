package dev.jnccl;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** The check of the {@code gpu}-tagged tests: skip, with the reason, unless real CUDA runs underneath. */
final class Gpus {
    private Gpus() {}

    static void assumeCuda() {
        Backend backend = JncclRuntime.query().backend();
        assumeTrue(backend == Backend.CUDA, "backend resolved to " + backend
                + " (no CUDA device visible); this test needs a GPU and jnccl.backend=cuda or auto");
    }
}
