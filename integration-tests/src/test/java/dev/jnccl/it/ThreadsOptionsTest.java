package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.jnccl.CommunicatorOptions;
import dev.jnccl.threads.ThreadsOptions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * {@link ThreadsOptions} refuses bad values when they are set, each with a message naming the
 * option and the value (never a NullPointerException without one), in the withers and in the
 * constructor alike; {@code devices} is a copy, and ranks may share a device.
 */
class ThreadsOptionsTest {
    private static final ThreadsOptions DEFAULTS = ThreadsOptions.defaults();

    @Test
    void maxLeadOutsideOneTo65536IsRefused() {
        for (int lead : new int[] {0, -1, 65537, Integer.MAX_VALUE, Integer.MIN_VALUE}) {
            assertEquals("ThreadsOptions: maxLead " + lead + " is out of range: expected 1 to 65536",
                    assertThrows(IllegalArgumentException.class, () -> DEFAULTS.withMaxLead(lead)).getMessage());
        }
        assertEquals(1, DEFAULTS.withMaxLead(1).maxLead());
        assertEquals(65536, DEFAULTS.withMaxLead(65536).maxLead());
    }

    @Test
    void devicesAreCheckedAndCopied() {
        List<Integer> withNull = Arrays.asList(0, null, 1);
        NullPointerException e = assertThrows(NullPointerException.class, () -> new ThreadsOptions(
                CommunicatorOptions.defaults(), false, false, 8, true, withNull));
        assertEquals("ThreadsOptions: the device of rank 1 is null in devices [0, null, 1]", e.getMessage());
        assertEquals("ThreadsOptions: devices is null (an empty list means one rank per device)",
                assertThrows(NullPointerException.class, () -> new ThreadsOptions(CommunicatorOptions.defaults(), false,
                        false, 8, true, null)).getMessage());
        assertEquals("withDevices: deviceOfRank is null",
                assertThrows(NullPointerException.class, () -> DEFAULTS.withDevices((int[]) null)).getMessage());
        assertEquals("ThreadsOptions: device -3 of rank 0 is negative: expected 0 or more",
                assertThrows(IllegalArgumentException.class, () -> DEFAULTS.withDevices(-3, 0)).getMessage());
        List<Integer> mutable = new ArrayList<>(List.of(2, 2, 0));
        ThreadsOptions shared = new ThreadsOptions(CommunicatorOptions.defaults(), false, false, 8, true, mutable);
        mutable.set(0, 5);
        assertEquals(List.of(2, 2, 0), shared.devices()); // a copy; a device shared by two ranks is fine
        int[] array = {1, 1};
        ThreadsOptions fromArray = DEFAULTS.withDevices(array);
        array[0] = 7;
        assertEquals(List.of(1, 1), fromArray.devices());
    }

    @Test
    void communicatorOptionsAreRequiredAndTheOtherValuesSurviveEachWither() {
        assertEquals("ThreadsOptions: communicator options are null",
                assertThrows(NullPointerException.class, () -> DEFAULTS.withCommunicator(null)).getMessage());
        CommunicatorOptions communicator = CommunicatorOptions.defaults().withWatchdog(Duration.ofSeconds(7));
        ThreadsOptions all = DEFAULTS.withCommunicator(communicator).withMemcpyAllGather(true).withMemcpySendRecv(true)
                .withMaxLead(3).withPinCpus(false).withDevices(0, 1);
        assertEquals(new ThreadsOptions(communicator, true, true, 3, false, List.of(0, 1)), all);
        assertEquals(new ThreadsOptions(communicator, true, false, 3, false, List.of(0, 1)),
                all.withMemcpySendRecv(false));
        assertEquals(List.of(), all.withDevices().devices());
    }
}
