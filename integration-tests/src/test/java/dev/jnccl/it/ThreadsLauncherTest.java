package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.Backend;
import dev.jnccl.JncclRuntime;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.junit.jupiter.api.Test;

/** The launcher's arguments: 0 means every visible device; more than visible is a clear error. */
class ThreadsLauncherTest {

    @Test
    void zeroGpusMeansEveryVisibleDeviceOneNamedThreadEach() {
        int visible = Cuda.deviceCount();
        Set<String> threads = ConcurrentHashMap.newKeySet();
        Set<Integer> devices = ConcurrentHashMap.newKeySet();
        ThreadsCommunicators.run(0, ThreadsOptions.defaults(), comm -> {
            threads.add(Thread.currentThread().getName());
            devices.add(comm.device());
            assertEquals(visible, comm.worldSize());
            assertEquals(comm.rank(), Cuda.currentDevice(), "rank thread did not select its device");
        });
        assertEquals(visible, threads.size());
        assertTrue(threads.contains("jnccl-rank-0"), threads.toString());
        assertEquals(visible, devices.size());
    }

    @Test
    void moreGpusThanVisibleIsAnError() {
        int visible = Cuda.deviceCount();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> ThreadsCommunicators.launch(visible + 1, ThreadsOptions.defaults(), comm -> { }));
        assertTrue(e.getMessage().startsWith("launch: " + (visible + 1) + " GPUs requested but only " + visible
                + " visible"), e.getMessage());
        // The emulation ignores CUDA_VISIBLE_DEVICES: the message names the variable that changes the count.
        String setting = JncclRuntime.query().backend() == Backend.HOST ? "(JNCCL_HOST_DEVICES=" : "(CUDA_VISIBLE_DEVICES=";
        assertTrue(e.getMessage().contains(setting), e.getMessage());
        assertEquals("launch: gpus -1 is negative (0 means all visible devices)", assertThrows(
                IllegalArgumentException.class,
                () -> ThreadsCommunicators.launch(-1, ThreadsOptions.defaults(), comm -> { })).getMessage());
        assertEquals("ThreadsOptions: maxLead 0 is out of range: expected 1 to 65536",
                assertThrows(IllegalArgumentException.class, () -> ThreadsOptions.defaults().withMaxLead(0)).getMessage());
    }
}
