package dev.jnccl.junit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.jnccl.Backend;
import org.junit.jupiter.api.Test;

/** RankInfo refuses values no rank can have, naming the value and the range. */
class RankInfoTest {
    @Test
    void valuesOutsideTheWorldAreRefused() {
        assertEquals("RankInfo: world 0 is below 1",
                assertThrows(IllegalArgumentException.class, () -> new RankInfo(0, 0, 0, Backend.HOST)).getMessage());
        assertEquals("RankInfo: rank 3 is outside [0, 2]",
                assertThrows(IllegalArgumentException.class, () -> new RankInfo(3, 3, 0, Backend.HOST)).getMessage());
        assertEquals("RankInfo: rank -1 is outside [0, 2]",
                assertThrows(IllegalArgumentException.class, () -> new RankInfo(-1, 3, 0, Backend.HOST)).getMessage());
        assertEquals("RankInfo: device -2 is negative",
                assertThrows(IllegalArgumentException.class, () -> new RankInfo(1, 3, -2, Backend.CUDA)).getMessage());
        assertEquals("RankInfo: backend is null",
                assertThrows(NullPointerException.class, () -> new RankInfo(1, 3, 0, null)).getMessage());
        RankInfo last = new RankInfo(2, 3, 5, Backend.CUDA);
        assertEquals(2, last.rank());
        assertEquals(5, last.device());
    }
}
