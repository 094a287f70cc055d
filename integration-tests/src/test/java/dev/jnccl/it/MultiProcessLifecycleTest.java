package dev.jnccl.it;

import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Timeout;

/**
 * Ranks as processes on the host emulation (its rendezvous is POSIX shared memory, so it works
 * across processes): W = 2 and 4 child JVMs, both communicator modes. See {@link MultiProcessWorlds}.
 */
@Timeout(value = 600, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class MultiProcessLifecycleTest extends MultiProcessLifecycleChecks {
    private final MultiProcessWorlds worlds = new MultiProcessWorlds("host", Map.of());

    @Override
    MultiProcessWorlds worlds() {
        return worlds;
    }
}
