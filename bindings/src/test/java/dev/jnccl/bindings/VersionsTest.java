package dev.jnccl.bindings;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class VersionsTest {

    @Test
    void decodesTheOldEncodingUpTo2_8() {
        assertEquals(new NcclVersion(2, 8, 4), NcclVersion.decode(2804));
        assertEquals(new NcclVersion(2, 7, 8), NcclVersion.decode(2708));
        assertEquals(new NcclVersion(2, 0, 5), NcclVersion.decode(2005));
    }

    @Test
    void decodesTheNewEncodingFrom2_9() {
        assertEquals(new NcclVersion(2, 9, 6), NcclVersion.decode(20906));
        assertEquals(new NcclVersion(2, 19, 3), NcclVersion.decode(21903));
        assertEquals(new NcclVersion(2, 28, 3), NcclVersion.decode(22803));
        assertEquals(22803, NcclVersion.decode(22803).code());
        assertEquals("2.28.3", NcclVersion.decode(22803).toString());
    }

    @Test
    void rejectsCodesThatAreNoVersion() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> NcclVersion.decode(0));
        assertTrue(e.getMessage().contains("0"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> NcclVersion.decode(-22803));
    }

    @Test
    void ordersVersionsAndKnowsTheMinimum() {
        assertTrue(NcclVersion.decode(21805).compareTo(NcclVersion.MINIMUM) < 0);
        assertTrue(NcclVersion.decode(21900).compareTo(NcclVersion.MINIMUM) >= 0);
        assertTrue(NcclVersion.decode(2804).compareTo(NcclVersion.decode(20906)) < 0);
        assertTrue(NcclVersion.decode(22803).atLeast(2, 28));
        assertFalse(NcclVersion.decode(22803).atLeast(2, 29));
    }

    @Test
    void featureTableGatesFp8On2_24() {
        assertFalse(NcclFeature.FP8.isSupportedBy(NcclVersion.decode(22304)));
        assertTrue(NcclFeature.FP8.isSupportedBy(NcclVersion.decode(22403)));
        assertTrue(NcclFeature.COMM_SPLIT.isSupportedBy(NcclVersion.MINIMUM));
        assertTrue(NcclFeature.MEM_ALLOC_AND_REGISTER.isSupportedBy(NcclVersion.MINIMUM));
        assertFalse(NcclFeature.BFLOAT16_AND_AVG.isSupportedBy(NcclVersion.decode(2804)));
        assertFalse(NcclFeature.ALL_TO_ALL.isSupportedBy(NcclVersion.decode(22707)));
        assertTrue(NcclFeature.ALL_TO_ALL.isSupportedBy(NcclVersion.decode(22800)));
    }

    @Test
    void decodesCudaVersions() {
        assertEquals(new CudaVersion(13, 0), CudaVersion.decode(13000));
        assertEquals(new CudaVersion(12, 8), CudaVersion.decode(12080));
        assertEquals("12.4", CudaVersion.decode(12040).toString());
    }

    @Test
    void backendPropertyAcceptsOnlyKnownValues() {
        assertEquals(Backend.HOST, Backend.parse(" Host ", "test"));
        assertEquals(Backend.AUTO, Backend.parse("auto", "test"));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> Backend.parse("gpu", "system property jnccl.backend"));
        assertEquals("system property jnccl.backend is 'gpu'; expected one of cuda, host, auto", e.getMessage());
    }
}
