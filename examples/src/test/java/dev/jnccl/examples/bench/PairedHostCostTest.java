package dev.jnccl.examples.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.testsupport.NativeEnv;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The paired harness {@link PairedHostCost} (scripts/gpu/gpu-hostcost-paired.sh) runs on the host
 * emulation: both sides of every case on the same communicators, each rank reporting each case once
 * with positive, ordered figures, and the twin's all-reduce (and jnccl's) checked element by element
 * on random data. The figures themselves mean nothing here.
 */
@Timeout(300)
class PairedHostCostTest {
    private static final int BLOCKS = 2;
    private static final int CALLS = 64;

    @Test
    void everyCaseOfEveryRankAtWorldTwoWithTheTwinCheckedOnRandomData() throws Exception {
        HostCostProgramsTest.assumeHost();
        try (NativeEnv env = NativeEnv.set("NCCL_MULTI_RANK_GPU_ENABLE", "1")) {
            String[] args = {"--world", "2", "--blocks", String.valueOf(BLOCKS), "--calls", String.valueOf(CALLS),
                "--warmup-ms", "20", "--warmup-calls", "256", "--pin-cpus", "false"};
            List<String> out = HostCostProgramsTest.rawLines(() -> PairedHostCost.main(args));
            assertChecked(out, 2);
            assertComplete(HostCostProgramsTest.parse("PAIRED", out), 2, "BLOCKING_SPLIT", PairedHostCost.CASES);
        }
    }

    @Test
    void aNonBlockingCommunicatorAtWorldOne() throws Exception {
        List<String> cases = List.of("transaction", "all_reduce", "all_to_all");
        String[] args = {"--world", "1", "--mode", "NON_BLOCKING", "--blocks", "3", "--calls", String.valueOf(CALLS),
            "--warmup-ms", "0", "--warmup-calls", "1", "--cases", String.join(",", cases)};
        List<String> out = HostCostProgramsTest.rawLines(() -> PairedHostCost.main(args));
        assertChecked(out, 1);
        List<Map<String, String>> lines = HostCostProgramsTest.parse("PAIRED", out);
        assertComplete(lines, 1, "NON_BLOCKING", cases);
        assertTrue(lines.stream().allMatch(l -> l.get("blocks").equals("3")), lines.toString());
    }

    /** One CHECK line per rank and side, each with no mismatch on every element. */
    private static void assertChecked(List<String> out, int world) {
        List<Map<String, String>> checks = HostCostProgramsTest.parse("CHECK", out);
        assertEquals(2 * world, checks.size(), "CHECK lines: " + checks);
        Set<String> seen = new HashSet<>();
        for (Map<String, String> check : checks) {
            assertEquals("0", check.get("mismatches"), check.toString());
            assertEquals("1024", check.get("elements"), check.toString());
            assertTrue(seen.add(check.get("rank") + "/" + check.get("impl")), "twice: " + check);
        }
        for (int rank = 0; rank < world; rank++) {
            assertTrue(seen.contains(rank + "/raw") && seen.contains(rank + "/jnccl"), "rank " + rank + ": " + seen);
        }
    }

    /** Every (rank, case) once, each with positive per-call times and ratios ordered min <= q1 <= median <= q3 <= max. */
    private static void assertComplete(List<Map<String, String>> lines, int world, String mode, List<String> cases) {
        Set<String> seen = new HashSet<>();
        for (Map<String, String> line : lines) {
            String what = line.toString();
            assertEquals(mode, line.get("mode"), what);
            assertEquals(String.valueOf(world), line.get("world"), what);
            assertEquals(String.valueOf(CALLS), line.get("calls"), what);
            assertTrue(seen.add(line.get("rank") + "/" + line.get("case")), "twice: " + what);
            for (String key : List.of("jnccl_us", "raw_us", "jnccl_host_us", "raw_host_us", "ratio_median",
                    "host_ratio_median")) {
                assertTrue(Double.parseDouble(line.get(key)) > 0, key + " not positive: " + what);
            }
            double[] r = {value(line, "ratio_min"), value(line, "ratio_q1"), value(line, "ratio_median"),
                value(line, "ratio_q3"), value(line, "ratio_max")};
            for (int i = 1; i < r.length; i++) {
                assertTrue(r[i - 1] <= r[i] + 1e-4, "ratios out of order: " + what);
            }
            assertTrue(value(line, "host_ratio_min") <= value(line, "host_ratio_median") + 1e-4
                    && value(line, "host_ratio_median") <= value(line, "host_ratio_max") + 1e-4, what);
            assertTrue(value(line, "jnccl_host_us") <= value(line, "jnccl_us") + 1e-3, what);
        }
        assertEquals(world * cases.size(), seen.size(), "ranks x cases: " + seen);
    }

    private static double value(Map<String, String> line, String key) {
        return Double.parseDouble(line.get(key));
    }

    @Test
    void badArgumentsAreRefusedNamingThem() {
        assertEquals("PairedHostCost: unknown case allgather (known: transaction,all_reduce,reduce_scatter,all_gather,"
                        + "broadcast,all_to_all,reduce_mean,reduce_max,reduce_norm_squared)",
                assertThrows(IllegalArgumentException.class, () -> PairedHostCost.Settings.parse(
                        new String[] {"--cases", "transaction,allgather"})).getMessage());
        String bad = assertThrows(IllegalArgumentException.class, () -> PairedHostCost.Settings.parse(
                new String[] {"--world", "3"})).getMessage();
        assertTrue(bad.startsWith("PairedHostCost: bad arguments: world 3") && bad.contains("count 1024"), bad);
        assertTrue(assertThrows(IllegalArgumentException.class, () -> PairedHostCost.Settings.parse(
                new String[] {"--blocks"})).getMessage().contains("--blocks"));
        PairedHostCost.Settings settings = PairedHostCost.Settings.parse(new String[] {"--blocks", "30", "--mode",
            "NON_BLOCKING", "--warmup-ms", "5"});
        assertEquals(30, settings.blocks());
        assertEquals(dev.jnccl.CommunicatorMode.NON_BLOCKING, settings.mode());
        assertEquals(5, settings.warmupMs());
        assertEquals(1000, settings.calls());
    }
}
