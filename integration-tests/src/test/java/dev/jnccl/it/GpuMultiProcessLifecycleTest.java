package dev.jnccl.it;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.bindings.NativeLibraries;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Timeout;

/**
 * {@link MultiProcessLifecycleTest} on real NCCL: W processes on GPU 0, each with its own
 * {@code NCCL_HOSTID} (NCCL then runs them as separate nodes over its socket transport on
 * {@code lo}). Skipped, with the reason, unless the backend is {@code cuda}.
 */
@Tag("gpu")
@Timeout(value = 900, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class GpuMultiProcessLifecycleTest extends MultiProcessLifecycleChecks {
    private final MultiProcessWorlds worlds = new MultiProcessWorlds("cuda",
            Map.of("NCCL_SOCKET_IFNAME", "lo", "NCCL_NVLS_ENABLE", "0"));

    @BeforeEach
    void requireCuda() {
        String backend;
        try {
            backend = NativeLibraries.load().backend().id();
        } catch (RuntimeException e) {
            backend = "unavailable (" + e.getMessage() + ")";
        }
        assumeTrue(backend.equals("cuda"), "backend resolved to " + backend
                + "; this test needs a CUDA device and jnccl.backend=cuda or auto");
    }

    @Override
    MultiProcessWorlds worlds() {
        return worlds;
    }
}
