package dev.jnccl.internal;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.Backend;
import dev.jnccl.JncclRuntime;
import org.junit.jupiter.api.Test;

/** The "how many devices are visible" setting named in the launchers' messages follows the backend. */
class VisibleDevicesTest {

    @Test
    void theEmulationNamesItsOwnVariableWithItsValueOrDefault() {
        assertEquals("JNCCL_HOST_DEVICES=unset (default 8) on the host emulation: set JNCCL_HOST_DEVICES (up to 255)"
                + " for more", VisibleDevices.hostSetting(null));
        assertEquals("JNCCL_HOST_DEVICES=3 on the host emulation: set JNCCL_HOST_DEVICES (up to 255) for more",
                VisibleDevices.hostSetting("3"));
    }

    @Test
    void theSettingMatchesTheBackendInUse() {
        String setting = VisibleDevices.setting();
        String expected = JncclRuntime.query().backend() == Backend.HOST ? "JNCCL_HOST_DEVICES=" : "CUDA_VISIBLE_DEVICES=";
        assertTrue(setting.startsWith(expected), setting);
    }
}
