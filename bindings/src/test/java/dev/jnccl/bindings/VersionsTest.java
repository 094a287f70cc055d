package dev.jnccl.bindings;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class VersionsTest {

    @Test
    void decodesTheOldEncodingUpTo2_8() {
        assertEquals(new LibraryVersion(2, 8, 4), LibraryVersion.decodeNccl(2804));
        assertEquals(new LibraryVersion(2, 7, 8), LibraryVersion.decodeNccl(2708));
        assertEquals(new LibraryVersion(2, 0, 5), LibraryVersion.decodeNccl(2005));
    }

    @Test
    void decodesTheNewEncodingFrom2_9() {
        assertEquals(new LibraryVersion(2, 9, 6), LibraryVersion.decodeNccl(20906));
        assertEquals(new LibraryVersion(2, 19, 3), LibraryVersion.decodeNccl(21903));
        assertEquals(new LibraryVersion(2, 28, 3), LibraryVersion.decodeNccl(22803));
        assertEquals("2.28.3", LibraryVersion.decodeNccl(22803).toString());
    }

    @Test
    void rejectsCodesThatAreNoVersion() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> LibraryVersion.decodeNccl(0));
        assertTrue(e.getMessage().contains("0"), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> LibraryVersion.decodeNccl(-22803));
    }

    @Test
    void ordersVersionsAndKnowsTheMinimum() {
        assertTrue(LibraryVersion.decodeNccl(21805).compareTo(LibraryVersion.NCCL_MINIMUM) < 0);
        assertTrue(LibraryVersion.decodeNccl(21900).compareTo(LibraryVersion.NCCL_MINIMUM) >= 0);
        assertTrue(LibraryVersion.decodeNccl(2804).compareTo(LibraryVersion.decodeNccl(20906)) < 0);
        assertTrue(LibraryVersion.decodeNccl(22803).compareTo(new LibraryVersion(2, 28, 0)) > 0);
        assertTrue(LibraryVersion.decodeNccl(22803).compareTo(new LibraryVersion(2, 28, 4)) < 0);
        assertTrue(LibraryVersion.decodeNccl(22803).compareTo(new LibraryVersion(2, 29, 0)) < 0);
    }

    @Test
    void featureTableGatesFp8On2_24() {
        assertFalse(NcclFeature.FP8.isSupportedBy(LibraryVersion.decodeNccl(22304)));
        assertTrue(NcclFeature.FP8.isSupportedBy(LibraryVersion.decodeNccl(22403)));
        assertTrue(NcclFeature.COMM_SPLIT.isSupportedBy(LibraryVersion.NCCL_MINIMUM));
        assertTrue(NcclFeature.MEM_ALLOC_AND_REGISTER.isSupportedBy(LibraryVersion.NCCL_MINIMUM));
        assertFalse(NcclFeature.BFLOAT16_AND_AVG.isSupportedBy(LibraryVersion.decodeNccl(2804)));
        assertFalse(NcclFeature.ALL_TO_ALL.isSupportedBy(LibraryVersion.decodeNccl(22707)));
        assertTrue(NcclFeature.ALL_TO_ALL.isSupportedBy(LibraryVersion.decodeNccl(22800)));
    }

    @Test
    void decodesCudaVersionsWithPatchZero() {
        assertEquals(new LibraryVersion(13, 0, 0), LibraryVersion.decodeCuda(13000));
        assertEquals(new LibraryVersion(12, 8, 0), LibraryVersion.decodeCuda(12080));
        assertEquals(new LibraryVersion(0, 0, 0), LibraryVersion.decodeCuda(0)); // no driver installed
        assertEquals("12.4.0", LibraryVersion.decodeCuda(12040).toString());
        assertThrows(IllegalArgumentException.class, () -> LibraryVersion.decodeCuda(-1));
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
