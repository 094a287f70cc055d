package dev.jnccl.internal;

import dev.jnccl.bindings.BackendSetting;
import dev.jnccl.bindings.NativeLibraries;

/**
 * The setting that decides how many devices are visible, for the launchers' "not enough devices"
 * messages: {@code CUDA_VISIBLE_DEVICES} on real CUDA, but {@code JNCCL_HOST_DEVICES} on the host
 * emulation, which ignores {@code CUDA_VISIBLE_DEVICES}: naming the CUDA variable there sends a
 * user without a GPU after a setting that changes nothing. Not API.
 */
public final class VisibleDevices {
    /** The emulation's device count when {@code JNCCL_HOST_DEVICES} is unset (the native runtime's default). */
    static final int HOST_DEFAULT = 8;

    private VisibleDevices() {}

    /**
     * The setting and its value, e.g. {@code CUDA_VISIBLE_DEVICES=0,1} or, on the emulation,
     * {@code JNCCL_HOST_DEVICES=unset (default 8) on the host emulation: set JNCCL_HOST_DEVICES for more}.
     *
     * @return the setting and its value, for an error message
     */
    public static String setting() {
        // The libraries are loaded by now (the launchers counted the devices): this only reads which.
        if (NativeLibraries.load().backend() == BackendSetting.HOST) {
            return hostSetting(System.getenv("JNCCL_HOST_DEVICES"));
        }
        return "CUDA_VISIBLE_DEVICES=" + System.getenv("CUDA_VISIBLE_DEVICES");
    }

    static String hostSetting(String value) {
        String shown = value == null ? "unset (default " + HOST_DEFAULT + ")" : value;
        return "JNCCL_HOST_DEVICES=" + shown + " on the host emulation: set JNCCL_HOST_DEVICES (up to 255) for more";
    }
}
