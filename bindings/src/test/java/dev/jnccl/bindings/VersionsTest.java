package dev.jnccl.bindings;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.Random;
import org.junit.jupiter.api.Test;

class VersionsTest {

    @Test
    void decodesTheOldEncodingUpTo2_8() {
        assertEquals(VersionCodes.of(2, 8, 4), VersionCodes.fromNccl(2804));
        assertEquals("2.8.4", VersionCodes.text(VersionCodes.fromNccl(2804)));
        assertEquals("2.7.8", VersionCodes.text(VersionCodes.fromNccl(2708)));
        assertEquals("2.0.5", VersionCodes.text(VersionCodes.fromNccl(2005)));
    }

    @Test
    void decodesTheNewEncodingFrom2_9() {
        assertEquals(VersionCodes.of(2, 9, 6), VersionCodes.fromNccl(20906));
        assertEquals(VersionCodes.of(2, 19, 3), VersionCodes.fromNccl(21903));
        assertEquals(VersionCodes.of(2, 28, 3), VersionCodes.fromNccl(22803));
        int code = VersionCodes.fromNccl(22803);
        assertEquals(2, VersionCodes.major(code));
        assertEquals(28, VersionCodes.minor(code));
        assertEquals(3, VersionCodes.patch(code));
        assertEquals("2.28.3", VersionCodes.text(code));
    }

    @Test
    void rejectsCodesThatAreNoVersion() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> VersionCodes.fromNccl(0));
        assertTrue(e.getMessage().contains("0"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> VersionCodes.fromNccl(-22803));
        assertEquals("VersionCodes.of: 2.100.0 has no code: expected major 0 to 214747, minor and patch 0 to 99",
                assertThrows(IllegalArgumentException.class, () -> VersionCodes.of(2, 100, 0)).getMessage());
        assertThrows(IllegalArgumentException.class, () -> VersionCodes.of(2, 1, 100));
        assertThrows(IllegalArgumentException.class, () -> VersionCodes.of(-1, 1, 0));
        assertThrows(IllegalArgumentException.class, () -> VersionCodes.of(2, -1, 0));
        assertThrows(IllegalArgumentException.class, () -> VersionCodes.of(214748, 0, 0));
        assertEquals("214747.99.99", VersionCodes.text(VersionCodes.of(214747, 99, 99)));
    }

    @Test
    void codesCompareAsTheVersionsDo() {
        assertTrue(VersionCodes.fromNccl(21805) < VersionCodes.NCCL_MINIMUM);
        assertTrue(VersionCodes.fromNccl(21900) >= VersionCodes.NCCL_MINIMUM);
        assertEquals("2.19.0", VersionCodes.text(VersionCodes.NCCL_MINIMUM));
        assertTrue(VersionCodes.fromNccl(2804) < VersionCodes.fromNccl(20906));
        assertTrue(VersionCodes.fromNccl(22803) > VersionCodes.of(2, 28, 0));
        assertTrue(VersionCodes.fromNccl(22803) < VersionCodes.of(2, 28, 4));
        assertTrue(VersionCodes.fromNccl(22803) < VersionCodes.of(2, 29, 0));
        assertTrue(VersionCodes.of(2, 99, 99) < VersionCodes.of(3, 0, 0));
        assertTrue(VersionCodes.fromCuda(12090) < VersionCodes.fromCuda(13000));
        // Every pair of versions in range orders as its components do.
        Random random = new Random(0x5eed);
        for (int i = 0; i < 2000; i++) {
            int[] a = {random.nextInt(30), random.nextInt(100), random.nextInt(100)};
            int[] b = {random.nextInt(30), random.nextInt(100), random.nextInt(100)};
            int expected = Integer.signum(Arrays.compare(a, b));
            int actual = Integer.signum(
                    Integer.compare(VersionCodes.of(a[0], a[1], a[2]), VersionCodes.of(b[0], b[1], b[2])));
            assertEquals(expected, actual, Arrays.toString(a) + " vs " + Arrays.toString(b));
        }
    }

    @Test
    void featureTableGatesFp8On2_24() {
        assertFalse(NcclFeature.FP8.isSupportedBy(VersionCodes.fromNccl(22304)));
        assertTrue(NcclFeature.FP8.isSupportedBy(VersionCodes.fromNccl(22403)));
        assertEquals("2.24.0", VersionCodes.text(NcclFeature.FP8.sinceVersion()));
        assertTrue(NcclFeature.COMM_SPLIT.isSupportedBy(VersionCodes.NCCL_MINIMUM));
        assertTrue(NcclFeature.MEM_ALLOC_AND_REGISTER.isSupportedBy(VersionCodes.NCCL_MINIMUM));
        assertFalse(NcclFeature.MEM_ALLOC_AND_REGISTER.isSupportedBy(VersionCodes.fromNccl(21805)));
        assertFalse(NcclFeature.BFLOAT16_AND_AVG.isSupportedBy(VersionCodes.fromNccl(2804)));
        assertFalse(NcclFeature.ALL_TO_ALL.isSupportedBy(VersionCodes.fromNccl(22707)));
        assertTrue(NcclFeature.ALL_TO_ALL.isSupportedBy(VersionCodes.fromNccl(22800)));
    }

    @Test
    void decodesCudaVersionsWithPatchZero() {
        assertEquals(VersionCodes.of(13, 0, 0), VersionCodes.fromCuda(13000));
        assertEquals(VersionCodes.of(12, 8, 0), VersionCodes.fromCuda(12080));
        assertEquals(0, VersionCodes.fromCuda(0)); // no driver installed
        assertEquals("0.0.0", VersionCodes.text(VersionCodes.fromCuda(0)));
        assertEquals("12.4.0", VersionCodes.text(VersionCodes.fromCuda(12040)));
        assertThrows(IllegalArgumentException.class, () -> VersionCodes.fromCuda(-1));
        assertFalse(CudaGraphs.isSupportedBy(VersionCodes.fromCuda(11080)));
        assertTrue(CudaGraphs.isSupportedBy(VersionCodes.fromCuda(12000)));
    }

    @Test
    void backendPropertyAcceptsOnlyKnownValues() {
        assertEquals(BackendSetting.HOST, BackendSetting.parse(" Host ", "test"));
        assertEquals(BackendSetting.AUTO, BackendSetting.parse("auto", "test"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> BackendSetting.parse("gpu", "system property jnccl.backend"));
        assertEquals("system property jnccl.backend is 'gpu'; expected one of cuda, host, auto", e.getMessage());
    }
}
