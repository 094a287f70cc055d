package dev.jnccl.examples.bench;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import javax.xml.parsers.DocumentBuilderFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;
import org.w3c.dom.Document;

/**
 * Runs the benchmark (on the host emulation without a GPU) for every supported operation at 2 and 3
 * ranks with the check on, and reads its output as a tool reading nccl-tests' would: the header
 * lines, every row's columns, #wrong, the footer; algbw and busbw against nccl-tests' formulas
 * (restated here from nccl-tests' sources, not taken from the program), the JSON file parsed and
 * compared with the table, the SVG parsed as XML.
 */
@Timeout(600)
class CollectiveBenchmarkTest {
    /** -b 8 -e 4K -f 4. */
    private static final long[] SIZES = {8, 32, 128, 512, 2048};

    @TempDir
    Path dir;

    private record Output(int status, String out, String err) {}

    private static Output run(String... args) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        int status = CollectiveBenchmark.run(args, new PrintStream(out, true, StandardCharsets.UTF_8),
                new PrintStream(err, true, StandardCharsets.UTF_8));
        return new Output(status, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
    }

    static Stream<Arguments> operationsAndRanks() {
        List<Arguments> cases = new ArrayList<>();
        for (String op : new String[] {"all_reduce", "reduce_scatter", "all_gather", "sendrecv", "alltoall",
                "broadcast", "reduce", "gather", "scatter", "alltoallv"}) {
            for (int ranks : new int[] {2, 3}) {
                cases.add(Arguments.of(op, ranks));
            }
        }
        // One rank: sendrecv to itself, alltoall of one slot, the rooted operations on the only rank.
        for (String op : new String[] {"sendrecv", "alltoall", "broadcast", "reduce", "gather", "scatter", "alltoallv"}) {
            cases.add(Arguments.of(op, 1));
        }
        return cases.stream();
    }

    @ParameterizedTest(name = "{0} -g {1}")
    @MethodSource("operationsAndRanks")
    void everyOperationPrintsNcclTestsTableWithCheckedResults(String op, int ranks) throws Exception {
        Path json = dir.resolve("out.json");
        Path svg = dir.resolve("out.svg");
        List<String> args = new ArrayList<>(List.of(op, "-b", "8", "-e", "4K", "-f", "4", "-g", String.valueOf(ranks),
                "-w", "1", "-n", "2", "-c", "1", "--json", json.toString(), "--svg", svg.toString()));
        if (ROOTED.contains(op)) {
            args.addAll(List.of("-r", String.valueOf(ranks - 1))); // the last rank is the root
        }
        Output o = run(args.toArray(String[]::new));
        assertEquals(0, o.status(), o.out() + o.err());
        @SuppressWarnings("unchecked")
        Map<String, Object> report = (Map<String, Object>) MiniJson.parse(Files.readString(json));
        checkReport(o.out(), op, ranks, "nccl", report);
        checkSvg(svg, op, expectedInPlace(op) ? 2 : 1);
    }

    @ParameterizedTest
    @ValueSource(strings = {"all_gather", "sendrecv", "alltoall"})
    void memcpyTransportIsASecondRunWithItsOwnReport(String op) throws Exception {
        Path json = dir.resolve("both.json");
        Path svg = dir.resolve("both.svg");
        Output o = run(op, "-b", "64", "-e", "1K", "-f", "4", "-g", "2", "-w", "1", "-n", "2", "--transport",
                "nccl,memcpy", "--json", json.toString(), "--svg", svg.toString());
        assertEquals(0, o.status(), o.out() + o.err());
        int second = o.out().indexOf("# jnccl ", 1);
        assertTrue(second > 0, o.out());
        List<?> runs = (List<?>) MiniJson.parse(Files.readString(json));
        assertEquals(2, runs.size());
        long[] sizes = {64, 256, 1024};
        checkReport(o.out().substring(0, second), op, 2, "nccl", cast(runs.get(0)), sizes, 1024);
        checkReport(o.out().substring(second), op, 2, "memcpy", cast(runs.get(1)), sizes, 1024);
        checkSvg(svg, op, 4);
    }

    @ParameterizedTest
    @ValueSource(strings = {"all_reduce", "reduce_scatter", "sendrecv"})
    void cudaGraphLaunchesAreTimedAndReported(String op) throws Exception {
        Path json = dir.resolve("graph.json");
        Output o = run(op, "-b", "64", "-e", "1K", "-f", "4", "-g", "2", "-w", "1", "-n", "3", "-G", "2",
                "--json", json.toString());
        assertEquals(0, o.status(), o.out() + o.err());
        assertTrue(o.out().contains(" iters: 3 agg iters: 1 validation: 1 graph: 2 unalign: 0\n"), o.out());
        assertTrue(o.out().contains("\n# Out of bounds values : 0 OK\n"), o.out());
        Map<String, Object> config = cast(cast(MiniJson.parse(Files.readString(json))).get("config"));
        assertEquals(2L, ((Number) config.get("graph")).longValue());
        assertUsage("-G 2 with --transport memcpy", "all_gather", "-G", "2", "--transport", "memcpy");
        assertUsage("--cudagraph -1: out of range [0, 1000000]", "all_reduce", "-G", "-1");
    }

    @ParameterizedTest
    @ValueSource(strings = {"all_reduce", "reduce", "gather", "alltoall", "sendrecv"})
    void localRegisterRegistersTheBuffersAndResultsStayChecked(String op) throws Exception {
        Path json = dir.resolve("registered.json");
        List<String> args = new ArrayList<>(List.of(op, "-b", "64", "-e", "4K", "-f", "4", "-g", "3", "-w", "1", "-n", "2",
                "-c", "1", "-R", "1", "--json", json.toString()));
        if (ROOTED.contains(op)) {
            args.addAll(List.of("-r", "2")); // the last rank is the root, as checkReport expects
        }
        Output o = run(args.toArray(String[]::new));
        assertEquals(0, o.status(), o.out() + o.err());
        assertTrue(o.out().contains("\n# jnccl: buffers from ncclMemAlloc, registered with each rank's communicator"
                + " (ncclCommRegister; local_register: 1)\n"), o.out());
        Map<String, Object> report = cast(MiniJson.parse(Files.readString(json)));
        checkReport(o.out(), op, 3, "nccl", report, new long[] {64, 256, 1024, 4096}, 4096);
        assertEquals(1L, ((Number) cast(report.get("jnccl")).get("local_register")).longValue());
        Output unregistered = run(op, "-b", "64", "-e", "64", "-g", "2", "-w", "0", "-n", "1", "--local_register=0");
        assertEquals(0, unregistered.status(), unregistered.out() + unregistered.err());
        assertTrue(unregistered.out().contains("\n# jnccl: buffers from ncclMemAlloc, not registered (local_register: 0)\n"),
                unregistered.out());
    }

    @Test
    void localRegisterOutsideZeroAndOneIsRefusedByName() {
        assertUsage("--local_register 2: symmetric window registration (nccl-tests' -R 2, ncclCommWindowRegister) is"
                + " not supported by jnccl; allowed range [0, 1]", "all_reduce", "-R", "2");
        assertUsage("--local_register 3: out of range [0, 1]", "all_reduce", "-R", "3");
        assertUsage("--local_register -1: out of range [0, 1]", "all_reduce", "--local_register", "-1");
        assertUsage("--local_register 'yes': not an integer", "all_reduce", "-R", "yes");
    }

    @Test
    void modeSelectsTheCommunicatorMode() throws Exception {
        Path json = dir.resolve("mode.json");
        Output o = run("reduce_scatter", "-b", "64", "-e", "1K", "-f", "4", "-g", "2", "-w", "1", "-n", "2",
                "--mode", "non_blocking", "--json", json.toString());
        assertEquals(0, o.status(), o.out() + o.err());
        assertTrue(o.out().contains("\n# jnccl: launcher threads, mode NON_BLOCKING, transport nccl, 2 rank(s);"), o.out());
        assertTrue(o.out().contains("\n# Out of bounds values : 0 OK\n"), o.out());
        Map<String, Object> jnccl = cast(cast(MiniJson.parse(Files.readString(json))).get("jnccl"));
        assertEquals("NON_BLOCKING", jnccl.get("mode"));
    }

    @Test
    void badCommandLinesAreUsageErrorsNamingTheProblem() {
        assertUsage("unknown operation 'all_reduces'", "all_reduces");
        assertUsage("-r 2 is not a rank of 2", "broadcast", "-g", "2", "-r", "2");
        assertUsage("--transport 'memcpy': broadcast runs on nccl", "broadcast", "--transport", "memcpy");
        assertUsage("--launcher mpi: -g 2: each MPI process drives one GPU", "all_reduce", "--launcher", "mpi", "-g", "2",
                "-b", "8", "-e", "8");
        assertUsage("--transport 'memcpy': all_reduce runs on nccl", "all_reduce", "--transport", "memcpy");
        assertUsage("-d 'float32': unknown datatype", "all_reduce", "-d", "float32");
        assertUsage("-o 'mulsum': unknown reduction", "all_reduce", "-o", "mulsum");
        assertUsage("-b 2048 is larger than -e 1024", "all_reduce", "-b", "2K", "-e", "1K");
        assertUsage("--minbytes '8X': not a size", "all_reduce", "-b", "8X");
        assertUsage("unknown or unsupported option '-z'", "all_reduce", "-z", "1");
        assertUsage("--iters 0: out of range [1, 1000000]", "all_reduce", "-n", "0");
        assertUsage("--mode 'blocking': expected blocking_split or non_blocking", "all_reduce", "--mode", "blocking");
        Output help = run("-h");
        assertEquals(0, help.status());
        assertTrue(help.out().startsWith("usage: bench.sh OP [flags]"), help.out());
    }

    @Test
    void reportFilesThatCannotBeWrittenAreRefusedBeforeTheRunWithTheReason() throws Exception {
        Path missing = dir.resolve("out2").resolve("b.json");
        assertUsage("--json " + missing + ": cannot write there: the directory " + missing.getParent()
                + " does not exist (create it first)", "all_reduce", "-g", "2", "-b", "8", "-e", "8", "--json",
                missing.toString());
        assertUsage("--svg " + dir + ": cannot write there: it is a directory", "all_reduce", "-g", "2", "-b", "8",
                "-e", "8", "--svg", dir.toString());
        Path json = dir.resolve("ok.json");
        Output ok = run("all_reduce", "-g", "2", "-b", "8", "-e", "8", "--json", json.toString());
        assertEquals(0, ok.status(), ok.err());
        assertTrue(Files.size(json) > 0);
    }

    @Test
    void progressNamesTheReductionOnlyForOperationsThatReduce() {
        String previous = System.getProperty("jnccl.bench.progress");
        System.setProperty("jnccl.bench.progress", "true");
        try {
            Output gather = run("all_gather", "-g", "2", "-b", "8", "-e", "8");
            assertEquals(0, gather.status(), gather.err());
            assertTrue(gather.err().contains("bench all_gather [nccl, float]: "), gather.err());
            Output reduce = run("all_reduce", "-g", "2", "-b", "8", "-e", "8", "-o", "max");
            assertTrue(reduce.err().contains("bench all_reduce [nccl, float max]: "), reduce.err());
        } finally {
            if (previous == null) {
                System.clearProperty("jnccl.bench.progress");
            } else {
                System.setProperty("jnccl.bench.progress", previous);
            }
        }
    }

    @Test
    void nccl_testsNumberFormats() {
        assertEquals("   0.00", NcclTestsFormat.floatStr(0.001, 7));
        assertEquals("1234.57", NcclTestsFormat.floatStr(1234.567, 7));
        assertEquals("12345.7", NcclTestsFormat.floatStr(12345.67, 7));
        assertEquals("1234568", NcclTestsFormat.floatStr(1234567.8, 7));
        assertEquals("1.2e+07", NcclTestsFormat.floatStr(12345678.0, 7));
        assertEquals("1e+06", NcclTestsFormat.floatStr(1234567.0, 6).trim());
        assertEquals("0", NcclTestsFormat.cG(0));
        assertEquals("12", NcclTestsFormat.cG(12));
        assertEquals("0.0491817", NcclTestsFormat.cG(0.04918174));
        assertEquals("123457", NcclTestsFormat.cG(123456.7));
        assertEquals("1.23457e+06", NcclTestsFormat.cG(1234567));
        assertEquals("1e-05", NcclTestsFormat.cG(0.00001));
        assertEquals("1e+06", NcclTestsFormat.cG(999999.5));
    }

    // ------------------------------------------------------------------ checks

    private static void assertUsage(String message, String... args) {
        Output o = run(args);
        assertEquals(CollectiveBenchmark.EXIT_USAGE, o.status(), o.err());
        assertTrue(o.err().contains(message), "expected '" + message + "' in:\n" + o.err());
        assertEquals("", o.out());
    }

    private static void checkReport(String text, String op, int ranks, String transport, Map<String, Object> json) {
        checkReport(text, op, ranks, transport, json, SIZES, 4096);
    }

    /** The operations with a root ({@code -r}). */
    private static final Set<String> ROOTED = Set.of("broadcast", "reduce", "gather", "scatter");

    /** Every operation has an out-of-place form; all but jnccl's alltoallv an in-place one. */
    private static boolean expectedInPlace(String op) {
        return !op.equals("alltoallv");
    }

    /** nccl-tests' size, count and bus factor for float (4 bytes), restated from its sources. */
    private static long[] shape(String op, long bytes, int n) {
        long count = bytes / 4;
        long base = (count / n) & ~3L; // per-rank count rounded down to 16 bytes
        return switch (op) {
            case "reduce_scatter", "all_gather", "alltoall", "gather", "scatter", "alltoallv" ->
                    new long[] {base * n * 4, base};
            default -> new long[] {count * 4, count};
        };
    }

    private static double busFactor(String op, int n) {
        return switch (op) {
            case "all_reduce" -> 2.0 * (n - 1) / n;
            case "reduce_scatter", "all_gather", "alltoall", "gather", "scatter", "alltoallv" -> (n - 1) / (double) n;
            default -> 1;
        };
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> cast(Object o) {
        return (Map<String, Object>) o;
    }

    private static void checkReport(String text, String op, int ranks, String transport, Map<String, Object> json,
                                    long[] sizes, long maxBytes) {
        List<String> lines = Arrays.asList(text.split("\n", -1));
        int i = 0;
        assertTrue(lines.get(i).matches("# jnccl .* benchmark \\(nccl-tests [0-9.]+ output\\) nccl-library=\\d+ "
                + "backend=(cuda|host)"), lines.get(i));
        assertEquals("# Collective test starting: jnccl_" + op + "_perf", lines.get(++i));
        assertEquals(String.format(Locale.ROOT, "# nThread 1 nGpus %d minBytes %d maxBytes %d step: 4(factor) warmup "
                + "iters: 1 iters: 2 agg iters: 1 validation: 1 graph: 0 unalign: 0", ranks, sizes[0],
                maxBytes), lines.get(++i));
        assertTrue(lines.get(++i).startsWith("# jnccl: launcher threads, mode BLOCKING_SPLIT, transport " + transport + ", " + ranks
                + " rank(s); time: CUDA events on the comms stream, maximum over ranks"), lines.get(i));
        while (lines.get(i + 1).startsWith("# jnccl: ")) {
            i++;
        }
        assertEquals("#", lines.get(++i));
        assertEquals("# Using devices", lines.get(++i));
        Pattern device = Pattern.compile("#  Rank +(\\d+) Group +0 Pid +\\d+ on +\\S+ device +(\\d+) \\[(cuda|host)] .+");
        for (int r = 0; r < ranks; r++) {
            Matcher m = device.matcher(lines.get(++i));
            assertTrue(m.matches(), lines.get(i));
            assertEquals(r, Integer.parseInt(m.group(1)));
        }
        assertEquals("#", lines.get(++i));
        // nccl-tests' writeResultHeader, with its format strings
        assertEquals(String.format("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place"
                + "          ", "", "", "", "", ""), lines.get(++i));
        assertEquals(String.format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s ", "size",
                "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
                "#wrong"), lines.get(++i));
        assertEquals(String.format("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s ", "(B)",
                "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""), lines.get(++i));

        List<?> results = (List<?>) json.get("results");
        assertEquals(sizes.length, results.size());
        boolean inPlace = expectedInPlace(op);
        double factor = busFactor(op, ranks);
        double busSum = 0;
        int measured = 0;
        for (int s = 0; s < sizes.length; s++) {
            String line = lines.get(++i);
            String[] t = line.trim().split(" +");
            long[] shape = shape(op, sizes[s], ranks);
            assertEquals(inPlace ? 13 : 9, t.length, line);
            assertEquals(shape[0], Long.parseLong(t[0]), line);
            assertEquals(shape[1], Long.parseLong(t[1]), line);
            assertEquals("float", t[2]);
            assertEquals(Set.of("all_reduce", "reduce_scatter", "sendrecv", "reduce").contains(op) ? "sum" : "none", t[3]);
            String root = ROOTED.contains(op) ? String.valueOf(ranks - 1) : "-1";
            assertEquals(root, t[4]);
            assertTrue(line.startsWith(String.format("%12d  %12d  %8s  %6s  %6s", shape[0], shape[1], "float", t[3], root)),
                    line);
            if (!inPlace) {
                assertTrue(line.length() == 85 + 32 && line.substring(85).isBlank(), "in-place columns not empty: " + line);
            }
            Map<String, Object> row = cast(results.get(s));
            assertEquals((double) shape[0], row.get("size"));
            assertEquals((double) shape[1], row.get("count"));
            assertEquals(String.format("%6s", root), row.get("root"));
            int column = 5;
            for (String placement : new String[] {"out_of_place", "in_place"}) {
                Object m = row.get(placement);
                if (placement.equals("in_place") && !inPlace) {
                    assertNull(m, line);
                    continue;
                }
                Map<String, Object> f = cast(m);
                double time = (Double) f.get("time");
                double algBw = (Double) f.get("alg_bw");
                double busBw = (Double) f.get("bus_bw");
                assertTrue(time > 0, line);
                // nccl-tests: algbw = size / time (bytes / 1e9 / seconds); busbw = algbw * factor
                assertClose(shape[0] / 1e3 / time, algBw, line);
                assertClose(algBw * factor, busBw, line);
                // The table rounds to its printed decimals (nccl-tests prints fewer for long times).
                assertClose(time, Double.parseDouble(t[column]), printedTolerance(t[column]), line);
                assertClose(algBw, Double.parseDouble(t[column + 1]), printedTolerance(t[column + 1]), line);
                assertClose(busBw, Double.parseDouble(t[column + 2]), printedTolerance(t[column + 2]), line);
                boolean unchecked = (op.equals("sendrecv") || op.equals("alltoall")) && placement.equals("in_place");
                assertEquals(unchecked ? "N/A" : "0", t[column + 3], "#wrong: " + line);
                assertEquals(unchecked ? null : 0.0, f.get("nwrong"), line);
                busSum += busBw;
                measured++;
                column += 4;
            }
        }
        assertEquals("# Out of bounds values : 0 OK", lines.get(++i));
        Matcher avg = Pattern.compile("# Avg bus bandwidth    : (\\S+) ").matcher(lines.get(++i));
        assertTrue(avg.matches(), lines.get(i));
        assertClose(busSum / measured, Double.parseDouble(avg.group(1)), 1e-5 * busSum / measured + 1e-6, lines.get(i));
        assertClose(busSum / measured, (Double) cast(json.get("average_bus_bandwidth")).get("bandwidth"), lines.get(i));
        assertEquals("#", lines.get(++i));
        assertEquals("# Collective test concluded: jnccl_" + op + "_perf", lines.get(++i));
        assertEquals("#", lines.get(++i));
        assertEquals("", lines.get(++i));
        assertEquals("", lines.get(++i)); // the split's end
        assertEquals(lines.size() - 1, i);

        assertEquals(3.0, json.get("version"));
        Map<String, Object> config = cast(json.get("config"));
        assertEquals((double) ranks, config.get("ngpus"));
        assertEquals(ranks, ((List<?>) config.get("devices")).size());
        assertEquals(0.0, cast(json.get("out_of_bounds")).get("count"));
        assertEquals("true", cast(json.get("out_of_bounds")).get("okay"));
        Map<String, Object> jnccl = cast(json.get("jnccl"));
        assertEquals(op, jnccl.get("operation"));
        assertEquals(transport, jnccl.get("transport"));
        assertEquals("threads", jnccl.get("launcher"));
        assertEquals("BLOCKING_SPLIT", jnccl.get("mode"));
    }

    /** Half a unit of the last printed decimal, and a little more for the rounding of the printing. */
    private static double printedTolerance(String printed) {
        int dot = printed.indexOf('.');
        int decimals = dot < 0 ? 0 : printed.length() - dot - 1;
        return 0.6 * Math.pow(10, -decimals);
    }

    private static void assertClose(double expected, double actual, String context) {
        assertClose(expected, actual, 2e-6 + 1e-5 * Math.abs(expected), context);
    }

    private static void assertClose(double expected, double actual, double tolerance, String context) {
        assertTrue(Math.abs(expected - actual) <= tolerance, "expected " + expected + ", got " + actual + " (+-"
                + tolerance + "): " + context);
    }

    private static void checkSvg(Path svg, String op, int lines) throws Exception {
        DocumentBuilderFactory factory = DocumentBuilderFactory.newInstance();
        factory.setNamespaceAware(true);
        Document doc = factory.newDocumentBuilder().parse(svg.toFile());
        assertEquals("svg", doc.getDocumentElement().getLocalName());
        assertEquals("http://www.w3.org/2000/svg", doc.getDocumentElement().getNamespaceURI());
        assertEquals(lines, doc.getElementsByTagNameNS("*", "polyline").getLength());
        String title = doc.getElementsByTagNameNS("*", "title").item(0).getTextContent();
        assertTrue(title.startsWith("jnccl " + op + ": bus bandwidth"), title);
        String all = doc.getDocumentElement().getTextContent();
        assertTrue(all.contains("bus bandwidth (GB/s)") && all.contains("size (bytes, log scale)"), all);
        assertTrue(all.contains(expectedInPlace(op) ? "in-place" : "out-of-place"), all);
    }
}
