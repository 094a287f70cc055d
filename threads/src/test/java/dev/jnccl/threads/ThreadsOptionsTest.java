package dev.jnccl.threads;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * What the launcher reads from {@link ThreadsOptions} besides its values (the values and their
 * checks are tested with the public API in the integration tests): whether ranks share a device,
 * and whether any transport is a device-to-device copy.
 */
class ThreadsOptionsTest {
    private static final ThreadsOptions DEFAULTS = ThreadsOptions.defaults();

    @Test
    void ranksShareDevicesOnlyWhenTwoNameTheSameOne() {
        assertFalse(DEFAULTS.sharesDevices(), "the default is one rank per device");
        assertFalse(DEFAULTS.withDevices(3, 1, 0, 2).sharesDevices());
        assertTrue(DEFAULTS.withDevices(0, 0).sharesDevices());
        assertTrue(DEFAULTS.withDevices(2, 0, 1, 0).sharesDevices());
    }

    @Test
    void eitherMemcpyTransportCountsAsMemcpy() {
        assertFalse(DEFAULTS.usesMemcpy());
        assertTrue(DEFAULTS.withMemcpyAllGather(true).usesMemcpy());
        assertTrue(DEFAULTS.withMemcpySendRecv(true).usesMemcpy());
        assertFalse(DEFAULTS.withMemcpyAllGather(true).withMemcpyAllGather(false).usesMemcpy());
    }
}
