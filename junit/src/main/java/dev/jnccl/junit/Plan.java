package dev.jnccl.junit;

import dev.jnccl.Backend;
import dev.jnccl.JncclRuntime;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * One world of a test, placed: each rank's device and the process environment the pack needs (the
 * emulation's fault hooks, several ranks per device), or why this machine cannot run it.
 *
 * @param world       the number of ranks
 * @param backend     what runs the collectives
 * @param deviceOfRank the device of each rank (empty when skipped)
 * @param environment variables set for the pack's life (empty: none)
 * @param skip        why the world is skipped, or null
 * @param shared      whether several ranks share a device
 */
record Plan(int world, Backend backend, int[] deviceOfRank, Map<String, String> environment, String skip,
            boolean shared) {
    /** The variable with which NCCL 2.30+ (and the emulation) accept several ranks of a process on one device. */
    static final String MULTI_RANK = "NCCL_MULTI_RANK_GPU_ENABLE";

    /** {@return the invocation's display name, as {@code world 2 [host]}} */
    String displayName() {
        return "world " + world + " [" + backend.name().toLowerCase(java.util.Locale.ROOT) + (shared ? ", shared" : "")
                + "]";
    }

    static Plan of(Settings settings, int world, JncclRuntime runtime) {
        Backend backend = runtime.backend();
        int devices = runtime.deviceCount();
        if (settings.fault().isPresent() && backend != Backend.HOST) {
            return skipped(world, backend, "@InjectFault needs the host emulation's fault hooks; this JVM runs real"
                    + " NCCL (backend CUDA): run it with -Djnccl.backend=host");
        }
        return switch (settings.placement()) {
            case GPUS, AUTO -> world <= devices ? placed(settings, world, backend, devices)
                    : skipped(world, backend, "world " + world + " needs " + world + " devices (Placement.GPUS: one"
                            + " rank per device); backend " + backend + " has " + devices + " visible " + howMany(backend)
                            + "; Placement.SHARED puts every rank on one device");
            case SHARED -> shared(settings, world, runtime);
            case HOST -> backend == Backend.HOST ? placed(settings, world, backend, devices)
                    : skipped(world, backend, "Placement.HOST runs on the host emulation; this JVM loaded real CUDA and"
                            + " NCCL (run it with -Djnccl.backend=host)");
        };
    }

    private static String howMany(Backend backend) {
        return backend == Backend.HOST ? "(JNCCL_HOST_DEVICES sets the emulation's count, default 8)"
                : "(CUDA_VISIBLE_DEVICES=" + System.getenv("CUDA_VISIBLE_DEVICES") + ")";
    }

    private static Plan shared(Settings settings, int world, JncclRuntime runtime) {
        Backend backend = runtime.backend();
        if (runtime.deviceCount() == 0) {
            return skipped(world, backend, "Placement.SHARED needs a device; none is visible " + howMany(backend));
        }
        if (backend == Backend.CUDA && world > 1 && !runtime.nccl().atLeast(2, 30)) {
            return skipped(world, backend, "Placement.SHARED needs NCCL 2.30 or newer for several ranks on one GPU;"
                    + " the loaded NCCL is " + runtime.nccl() + " (-Djnccl.nccl.library=/path/libnccl.so.2 loads another)");
        }
        if (backend == Backend.CUDA && world > 1 && !"1".equals(System.getenv(MULTI_RANK))) {
            return skipped(world, backend, "Placement.SHARED needs the environment variable " + MULTI_RANK + "=1 for"
                    + " several ranks on one GPU (it is " + System.getenv(MULTI_RANK) + ")");
        }
        return new Plan(world, backend, new int[world], environment(settings, world > 1 && backend == Backend.HOST),
                null, world > 1);
    }

    /** Rank r on device r, or on device r mod devices when the world is larger (the emulation only). */
    private static Plan placed(Settings settings, int world, Backend backend, int devices) {
        int[] deviceOfRank = new int[world];
        for (int rank = 0; rank < world; rank++) {
            deviceOfRank[rank] = rank % devices;
        }
        boolean shared = world > devices;
        return new Plan(world, backend, deviceOfRank, environment(settings, shared), null, shared);
    }

    private static Plan skipped(int world, Backend backend, String why) {
        return new Plan(world, backend, new int[0], Map.of(), why, false);
    }

    /** The emulation's variables for the fault, and for several ranks per device. */
    private static Map<String, String> environment(Settings settings, boolean multiRank) {
        Map<String, String> env = new LinkedHashMap<>();
        if (multiRank) {
            env.put(MULTI_RANK, "1");
        }
        settings.fault().ifPresent(fault -> {
            String rank = Integer.toString(fault.rank());
            switch (fault.kind()) {
                case FAIL, HANG -> {
                    env.put("JNCCL_HOST_FAULT", fault.kind() == InjectFault.Kind.FAIL ? "fail" : "hang");
                    env.put("JNCCL_HOST_FAULT_RANK", rank);
                    env.put("JNCCL_HOST_FAULT_AT", Integer.toString(fault.at()));
                }
                case LAG -> {
                    env.put("JNCCL_HOST_DELAY_RANK", rank);
                    env.put("JNCCL_HOST_DELAY_US", Long.toString(fault.lagMicros()));
                }
            }
        });
        return Map.copyOf(env);
    }
}
