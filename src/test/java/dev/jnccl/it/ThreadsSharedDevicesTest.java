package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.NcclException;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import dev.jnccl.testsupport.NativeEnv;
import dev.jnccl.threads.ThreadsPack;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Several ranks on one device ({@link ThreadsOptions#withDevices(int...)}): the placement, the
 * collectives on ranks that share a device (host emulation with NCCL_MULTI_RANK_GPU_ENABLE=1, as
 * NCCL 2.30 allows), the refusal NCCL 2.28 gives and what the exception then tells the user, and
 * bad arguments.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsSharedDevicesTest {

    @Test
    void ranksRunOnTheirDevicesAndTheCollectivesAreRightWhenDevicesAreShared() {
        Packs.assumeHost("switches NCCL_MULTI_RANK_GPU_ENABLE inside the process");
        int[] deviceOfRank = {0, 0, 1, 1, 1};
        Map<Integer, Integer> seen = new ConcurrentHashMap<>();
        try (NativeEnv env = NativeEnv.set("NCCL_MULTI_RANK_GPU_ENABLE", "1")) {
            for (Packs.Mode mode : Packs.Mode.all()) {
                ThreadsOptions options = mode.options().withDevices(deviceOfRank);
                Packs.run(deviceOfRank.length, options, c -> {
                    seen.put(c.rank, c.comm.device());
                    assertEquals(c.comm.device(), Cuda.currentDevice(), c.what("current device of the rank's thread"));
                    Scenarios.transactionCommands(c);
                    Scenarios.convenienceOperations(c);
                    Scenarios.hostHelpers(c);
                });
            }
        }
        for (int rank = 0; rank < deviceOfRank.length; rank++) {
            assertEquals(deviceOfRank[rank], seen.get(rank), "device of rank " + rank);
        }
    }

    @Test
    void eightRanksOnOneDevice() {
        Packs.assumeHost("switches NCCL_MULTI_RANK_GPU_ENABLE inside the process");
        try (NativeEnv env = NativeEnv.set("NCCL_MULTI_RANK_GPU_ENABLE", "1")) {
            Packs.run(8, ThreadsOptions.defaults().withDevices(0, 0, 0, 0, 0, 0, 0, 0), c -> {
                assertEquals(0, c.comm.device(), c.what("device"));
                Scenarios.transactionCommands(c);
                Scenarios.mixedTransaction(c);
            });
        }
    }

    @Test
    void anNcclThatRefusesSharedDevicesGetsAnExceptionSayingWhatToSetOrLoad() {
        Packs.assumeHost("switches NCCL_MULTI_RANK_GPU_ENABLE inside the process");
        ThreadsOptions options = ThreadsOptions.defaults().withDevices(1, 1, 2)
                .withCommunicator(dev.jnccl.CommunicatorOptions.defaults().withInitTimeout(Duration.ofSeconds(20)));
        try (NativeEnv env = NativeEnv.set("NCCL_MULTI_RANK_GPU_ENABLE", "0")) {
            try (ThreadsPack pack = ThreadsCommunicators.launch(0, options, comm -> { })) {
                RuntimeException e = assertThrows(RuntimeException.class, pack::join);
                String all = ThreadsFailureTest.chain(e);
                assertTrue(all.contains("ranks [0, 1] share device 1"), all);
                assertTrue(all.contains("NCCL_MULTI_RANK_GPU_ENABLE=1"), all);
                assertTrue(all.contains("jnccl.nccl.library"), all);
                Throwable refusal = e instanceof IllegalStateException ? e : null;
                for (Throwable t : e.getSuppressed()) {
                    if (refusal == null && t instanceof IllegalStateException) {
                        refusal = t;
                    }
                }
                assertTrue(refusal != null, () -> "no IllegalStateException explaining the refusal in " + all);
                assertInstanceOf(NcclException.class, refusal.getCause(), all);
                assertTrue(refusal.getCause().getMessage().contains("Duplicate GPU"), all);
            }
        }
        Packs.assertNoPackThreads();
    }

    @Test
    void badPlacementsAreRefusedBeforeAnyRankStarts() {
        int visible = Cuda.deviceCount();
        assertEquals("ThreadsOptions: device -1 of rank 2 is negative",
                assertThrows(IllegalArgumentException.class,
                        () -> ThreadsOptions.defaults().withDevices(0, 0, -1)).getMessage());
        assertEquals("launch: gpus 3 does not match the 2 ranks of ThreadsOptions.devices [0, 0] (pass 0 or 2)",
                assertThrows(IllegalArgumentException.class, () -> ThreadsCommunicators.launch(3,
                        ThreadsOptions.defaults().withDevices(0, 0), comm -> { })).getMessage());
        IllegalArgumentException tooHigh = assertThrows(IllegalArgumentException.class,
                () -> ThreadsCommunicators.launch(0, ThreadsOptions.defaults().withDevices(0, visible), comm -> { }));
        assertTrue(tooHigh.getMessage().startsWith("launch: rank 1 is on device " + visible + " but only " + visible
                + " devices are visible"), tooHigh.getMessage());
        assertEquals(List.of(), ThreadsOptions.defaults().withDevices(0, 1).withDevices().devices());
        Packs.assertNoPackThreads();
    }
}
