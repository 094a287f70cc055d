package dev.jnccl.examples.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.Backend;
import dev.jnccl.JncclRuntime;
import dev.jnccl.testsupport.NativeEnv;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The host-cost programs {@link ThreadsHostCost} and {@link MultiRankHostCost} (whose RESULT lines
 * scripts/gpu/gpu-hostcost-threads.sh, gpu-hostcost-multi.sh and gpu-torch-hostcost.sh fold into tables)
 * run on the host emulation: every rank, mode and case reports once, with figures that are
 * consistent (best <= median, host-only <= all included, one sample per repetition); bad
 * arguments are refused with a message naming them. The figures themselves mean nothing here.
 */
@Timeout(300)
class HostCostProgramsTest {
    private static final String ITERS = "512";
    private static final int REPS = 2;

    /** Runs {@code main} with System.out captured; returns its RESULT lines as key=value maps. */
    private static List<Map<String, String>> results(ThrowingRunnable main) throws Exception {
        return parse("RESULT", rawLines(main));
    }

    /** Runs {@code main} with System.out captured; returns what it printed, line by line. */
    static List<String> rawLines(ThrowingRunnable main) throws Exception {
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        PrintStream original = System.out;
        System.setOut(new PrintStream(captured, true, StandardCharsets.UTF_8));
        try {
            main.run();
        } finally {
            System.setOut(original);
        }
        return captured.toString(StandardCharsets.UTF_8).lines().toList();
    }

    /** The lines that begin with {@code tag}, as key=value maps. */
    static List<Map<String, String>> parse(String tag, List<String> lines) {
        return lines.stream().filter(l -> l.startsWith(tag + " ")).map(l -> {
            Map<String, String> fields = new HashMap<>();
            for (String field : l.substring(tag.length() + 1).split(" ")) {
                String[] kv = field.split("=", 2);
                fields.put(kv[0], kv[1]);
            }
            return fields;
        }).toList();
    }

    interface ThrowingRunnable {
        void run() throws Exception;
    }

    static void assumeHost() {
        Assumptions.assumeTrue(JncclRuntime.query().backend() == Backend.HOST,
                "sets NCCL_MULTI_RANK_GPU_ENABLE for the host emulation; backend is " + JncclRuntime.query().backend());
    }

    /** Every (rank, mode, case) exactly once, each line consistent. */
    private static void assertComplete(List<Map<String, String>> lines, int world, String launch, List<String> cases) {
        Set<String> seen = new HashSet<>();
        for (Map<String, String> line : lines) {
            String what = line.toString();
            assertEquals("jnccl", line.get("impl"), what);
            assertEquals(launch, line.get("launch"), what);
            assertEquals(String.valueOf(world), line.get("world"), what);
            assertEquals(ITERS, line.get("iters"), what);
            assertEquals(String.valueOf(REPS), line.get("reps"), what);
            assertTrue(seen.add(line.get("rank") + "/" + line.get("mode") + "/" + line.get("case")), "twice: " + what);
            double median = Double.parseDouble(line.get("median_us"));
            double best = Double.parseDouble(line.get("min_us"));
            double hostMedian = Double.parseDouble(line.get("enqueue_median_us"));
            double hostBest = Double.parseDouble(line.get("enqueue_min_us"));
            assertTrue(best > 0 && best <= median, what);
            assertTrue(hostBest > 0 && hostBest <= hostMedian && hostBest <= best + 0.001, what);
            String[] samples = line.get("samples_us").split(",");
            assertEquals(REPS, samples.length, what);
            double lowest = Double.MAX_VALUE;
            for (String sample : samples) {
                lowest = Math.min(lowest, Double.parseDouble(sample));
            }
            assertEquals(lowest, best, 0.0011, "best = the lowest sample: " + what);
        }
        assertEquals(world * 2 * cases.size(), seen.size(), "ranks x modes x cases: " + seen);
        for (int rank = 0; rank < world; rank++) {
            for (String mode : List.of("BLOCKING_SPLIT", "NON_BLOCKING")) {
                for (String c : cases) {
                    assertTrue(seen.contains(rank + "/" + mode + "/" + c), "missing " + rank + "/" + mode + "/" + c);
                }
            }
        }
    }

    @Test
    void threadsModeReportsEveryRankModeAndCaseWithRanksSharingOneDevice() throws Exception {
        assumeHost();
        List<String> cases = List.of("transaction", "all_reduce_ordered");
        try (NativeEnv env = NativeEnv.set("NCCL_MULTI_RANK_GPU_ENABLE", "1")) {
            List<Map<String, String>> lines = results(() -> ThreadsHostCost.main(new String[] {"--world", "2",
                    "--iters", ITERS, "--warmup", "256", "--warmup-ms", "30", "--reps", String.valueOf(REPS), "--cases",
                    String.join(",", cases), "--pin-cpus", "false", "--max-lead", "4"}));
            assertComplete(lines, 2, "threads", cases);
        }
    }

    @Test
    void oneProcessPerRankReportsEveryCaseAtWorldOne() throws Exception {
        List<Map<String, String>> lines = results(() -> MultiRankHostCost.main(new String[] {"--iters", ITERS,
                "--warmup", "1", "--warmup-ms", "20", "--reps", String.valueOf(REPS)}));
        assertComplete(lines, 1, "process", RankHostCost.CASES);
    }

    @Test
    void badArgumentsAreRefusedNamingThem() {
        assertEquals("ThreadsHostCost: --rank is not an option of this program",
                assertThrows(IllegalArgumentException.class,
                        () -> RankHostCost.Settings.parse(new String[] {"--rank", "1"}, true, "ThreadsHostCost"))
                        .getMessage());
        assertEquals("MultiRankHostCost: --max-lead is not an option of this program",
                assertThrows(IllegalArgumentException.class,
                        () -> RankHostCost.Settings.parse(new String[] {"--max-lead", "2"}, false, "MultiRankHostCost"))
                        .getMessage());
        assertEquals("ThreadsHostCost: unknown case allgather in --cases transaction,allgather (known: transaction,"
                        + "all_reduce_ordered,reduce_scatter,reduce_scatter_ordered,broadcast_ordered,"
                        + "all_to_all_ordered,reduce_mean_ordered,reduce_max_ordered,reduce_norm_squared_ordered)",
                assertThrows(IllegalArgumentException.class, () -> RankHostCost.Settings.parse(
                        new String[] {"--cases", "transaction,allgather"}, true, "ThreadsHostCost")).getMessage());
        assertEquals("ThreadsHostCost: --world needs a value",
                assertThrows(IllegalArgumentException.class,
                        () -> RankHostCost.Settings.parse(new String[] {"--world"}, true, "ThreadsHostCost"))
                        .getMessage());
        assertTrue(assertThrows(IllegalArgumentException.class, () -> RankHostCost.Settings.parse(
                new String[] {"--warmup-ms", "-1"}, true, "ThreadsHostCost")).getMessage().contains("warmup-ms -1 (>= 0)"));
        String bad = assertThrows(IllegalArgumentException.class, () -> RankHostCost.Settings.parse(
                new String[] {"--world", "3"}, true, "ThreadsHostCost")).getMessage();
        assertTrue(bad.startsWith("ThreadsHostCost: bad arguments: world 3") && bad.contains("count 1024 (divisible"),
                bad);
        RankHostCost.Settings settings = RankHostCost.Settings.parse(new String[] {"--world", "4", "--mode",
                "NON_BLOCKING", "--max-lead", "3", "--pin-cpus", "false"}, true, "ThreadsHostCost");
        assertEquals(List.of(dev.jnccl.CommunicatorMode.NON_BLOCKING), settings.modes());
        assertEquals(3, settings.maxLead());
        assertEquals(false, settings.pinCpus());
        assertEquals(4, settings.world());
        assertEquals(2000, settings.warmupMs(), "the warm-up lasts 2 s by default, not only a count of calls");
    }
}
