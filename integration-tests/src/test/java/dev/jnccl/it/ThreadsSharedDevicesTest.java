package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.NcclException;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import dev.jnccl.testsupport.NativeEnv;
import dev.jnccl.threads.ThreadsPack;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;
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
        // The second placement: two shared devices, ranks not adjacent, a rank alone on its device.
        for (int[] deviceOfRank : List.of(new int[] {1, 1, 2}, new int[] {2, 0, 2, 1, 0})) {
            ThreadsOptions options = ThreadsOptions.defaults().withDevices(deviceOfRank)
                    .withCommunicator(dev.jnccl.CommunicatorOptions.defaults().withInitTimeout(Duration.ofSeconds(20)));
            try (NativeEnv env = NativeEnv.set("NCCL_MULTI_RANK_GPU_ENABLE", "0");
                 ThreadsPack pack = ThreadsCommunicators.launch(0, options, comm -> { })) {
                RuntimeException e = assertThrows(RuntimeException.class, pack::join);
                List<Throwable> failures = new ArrayList<>();
                failures.add(e);
                failures.addAll(List.of(e.getSuppressed()));
                String all = failures.stream().map(ThreadsFailureTest::chain).collect(Collectors.joining(" || "));
                // NCCL may report the refusal to any rank, also one alone on its device: whichever rank's
                // exception explains it must name ranks that truly share a device of this placement.
                List<IllegalStateException> refusals = failures.stream()
                        .filter(t -> t instanceof IllegalStateException && t.getMessage().contains(" share device "))
                        .map(IllegalStateException.class::cast).toList();
                assertFalse(refusals.isEmpty(), () -> "no IllegalStateException explaining the refusal in " + all);
                for (IllegalStateException refusal : refusals) {
                    assertNamesTrulySharingRanks(refusal.getMessage(), deviceOfRank);
                    assertTrue(refusal.getMessage().contains("NCCL_MULTI_RANK_GPU_ENABLE=1"), refusal.getMessage());
                    assertTrue(refusal.getMessage().contains("jnccl.nccl.library"), refusal.getMessage());
                    assertInstanceOf(NcclException.class, refusal.getCause(), all);
                    assertTrue(refusal.getCause().getMessage().contains("Duplicate GPU"), all);
                }
            }
        }
        Packs.assertNoPackThreads();
    }

    /**
     * {@code message} says "ranks [a, b, ...] share device d" for every device of the placement that
     * several ranks share, and only for those, with exactly the ranks on it.
     */
    private static void assertNamesTrulySharingRanks(String message, int[] deviceOfRank) {
        Map<Integer, List<Integer>> expected = new TreeMap<>();
        for (int rank = 0; rank < deviceOfRank.length; rank++) {
            expected.computeIfAbsent(deviceOfRank[rank], d -> new ArrayList<>()).add(rank);
        }
        expected.values().removeIf(ranks -> ranks.size() < 2);
        Map<Integer, List<Integer>> named = new TreeMap<>();
        Matcher m = Pattern.compile("ranks \\[([0-9, ]+)\\] share device ([0-9]+)").matcher(message);
        while (m.find()) {
            List<Integer> ranks = Stream.of(m.group(1).split(", ")).map(Integer::valueOf).toList();
            assertNull(named.put(Integer.valueOf(m.group(2)), ranks), () -> "device named twice in " + message);
        }
        assertEquals(expected, named, () -> "sharing ranks named in: " + message + " (placement "
                + Arrays.toString(deviceOfRank) + ")");
    }

    @Test
    void badPlacementsAreRefusedBeforeAnyRankStarts() {
        int visible = Cuda.deviceCount();
        assertEquals("ThreadsOptions: device -1 of rank 2 is negative: expected 0 or more",
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
