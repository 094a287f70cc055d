package dev.jnccl.bindings;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.testsupport.ChildJvm;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * The host emulation's environment variables (JNCCL_HOST_*) are validated when it is loaded: a
 * malformed or out-of-range value makes {@link NativeLibraries#load()} throw a
 * {@link NativeLibraryException} that names the variable, the value and the accepted range, and the
 * next attempt judges the environment afresh; valid values at the edges of each range are accepted.
 * The cases run in a child JVM ({@link EmulationConfigProbe}), which sets each case's variables in
 * its C environment before it loads.
 */
class EmulationConfigTest {
    /** Variable, lowest and highest accepted value (JNCCL_HOST_DELAY_DEVICE: with the default 8 devices). */
    private record IntVariable(String name, long low, long high) {
        String range() {
            return "an integer in [" + low + ", " + high + "]";
        }
    }

    private static final List<IntVariable> INTEGERS = List.of(
            new IntVariable("JNCCL_HOST_DEVICES", 0, 255),
            new IntVariable("JNCCL_HOST_CHUNK_BYTES", 4096, 256L << 20),
            new IntVariable("JNCCL_HOST_INIT_TIMEOUT_MS", 1, 24L * 3600 * 1000),
            new IntVariable("JNCCL_HOST_FAULT_RANK", 0, Integer.MAX_VALUE),
            new IntVariable("JNCCL_HOST_FAULT_AT", 1, Integer.MAX_VALUE),
            new IntVariable("JNCCL_HOST_DELAY_US", 0, 60_000_000),
            new IntVariable("JNCCL_HOST_DELAY_DEVICE", 0, 7),
            new IntVariable("JNCCL_HOST_DELAY_RANK", 0, Integer.MAX_VALUE));

    /** Values that are no plain decimal integer (the last one overflows a 64-bit long). */
    private static final List<String> MALFORMED = List.of("lots", "12abc", "", " 8", "0x10", "99999999999999999999");

    /** One case: NAME=value pairs (joined as the probe reads them) and the expected line's tail. */
    private record Case(String spec, String expected) {}

    private static String spec(String... pairs) {
        List<String> joined = new ArrayList<>();
        for (int i = 0; i < pairs.length; i += 2) {
            joined.add(pairs[i] + "=" + pairs[i + 1]);
        }
        return String.join("\u0001", joined);
    }

    private static String refused(String name, String value, String range) {
        return "FAILED " + NativeLibraryException.class.getName() + ": The host emulation refuses its environment: "
                + name + "=" + value + " is not valid: expected " + range + ".";
    }

    @Test
    void badValuesAreRefusedAtLoadNamingVariableValueAndRange() throws Exception {
        long seed = System.nanoTime();
        Random random = new Random(seed);
        List<Case> cases = new ArrayList<>();
        for (IntVariable v : INTEGERS) {
            List<String> values = new ArrayList<>(MALFORMED);
            values.add(Long.toString(v.low() - 1)); // the edges, then anywhere beyond them
            values.add(Long.toString(v.high() + 1));
            values.add(Long.toString(v.low() - 2 - random.nextInt(1 << 20)));
            values.add(Long.toString(v.high() + 2 + random.nextInt(1 << 20)));
            for (String value : values) {
                cases.add(new Case(spec(v.name(), value), refused(v.name(), value, v.range())));
            }
        }
        for (String value : List.of("boom", "", "HANG", "fail ")) {
            cases.add(new Case(spec("JNCCL_HOST_FAULT", value), refused("JNCCL_HOST_FAULT", value, "fail, hang, hang-enqueue or hang-abort")));
        }
        // The device number's range follows the device count.
        cases.add(new Case(spec("JNCCL_HOST_DEVICES", "2", "JNCCL_HOST_DELAY_DEVICE", "2"),
                refused("JNCCL_HOST_DELAY_DEVICE", "2", "an integer in [0, 1]")));
        // Several bad variables: each is named.
        cases.add(new Case(spec("JNCCL_HOST_FAULT_AT", "0", "JNCCL_HOST_CHUNK_BYTES", "1k"), "FAILED "
                + NativeLibraryException.class.getName() + ": The host emulation refuses its environment: "
                + "JNCCL_HOST_CHUNK_BYTES=1k is not valid: expected an integer in [4096, 268435456]; "
                + "JNCCL_HOST_FAULT_AT=0 is not valid: expected an integer in [1, 2147483647]."));
        // After all those refusals, a valid environment loads (nothing of the refused copies stayed).
        cases.add(new Case(spec("JNCCL_HOST_DEVICES", "3"), "LOADED status=0 devices=3"));
        List<String> args = new ArrayList<>();
        cases.forEach(c -> args.add(c.spec()));
        check(cases, args, seed);
    }

    @Test
    void validEdgeValuesAreAccepted() throws Exception {
        List<Case> cases = new ArrayList<>();
        List<String> args = new ArrayList<>();
        for (IntVariable v : INTEGERS) {
            for (long value : new long[] {v.low(), v.high()}) {
                cases.add(new Case(spec(v.name(), Long.toString(value)), "ACCEPTED"));
            }
        }
        cases.add(new Case(spec("JNCCL_HOST_FAULT", "fail"), "ACCEPTED"));
        cases.add(new Case(spec("JNCCL_HOST_FAULT", "hang"), "ACCEPTED"));
        cases.add(new Case(spec("JNCCL_HOST_FAULT", "hang-enqueue"), "ACCEPTED"));
        cases.add(new Case(spec("JNCCL_HOST_FAULT", "hang-abort"), "ACCEPTED"));
        cases.add(new Case(spec("JNCCL_HOST_DEVICES", "1", "JNCCL_HOST_DELAY_DEVICE", "0"), "ACCEPTED"));
        for (Case c : cases) {
            args.add("--check");
            args.add(c.spec());
        }
        // Through the loader: the smallest count of devices, 0, loads and reports none (cudaErrorNoDevice),
        // as on a machine without a GPU.
        cases.add(new Case(spec("JNCCL_HOST_DEVICES", "0", "JNCCL_HOST_CHUNK_BYTES", "4096"),
                "LOADED status=100 devices=0"));
        args.add(cases.getLast().spec());
        check(cases, args, 0);
    }

    private static void check(List<Case> cases, List<String> args, long seed) throws Exception {
        ChildJvm.Result result = ChildJvm.run(List.of("--enable-native-access=ALL-UNNAMED", "-Djnccl.backend=host",
                "-XX:TieredStopAtLevel=1", "-Xmx128m", "-Djnccl.test.log.level=WARN"), java.util.Map.of(),
                EmulationConfigProbe.class, args.toArray(String[]::new));
        String output = result.output();
        List<String> lines = output.lines().filter(l -> l.startsWith("CASE ")).toList();
        assertEquals(cases.size(), lines.size(), "seed " + seed + ":\n" + output);
        for (int i = 0; i < cases.size(); i++) {
            String expected = "CASE " + i + " " + cases.get(i).expected();
            assertTrue(lines.get(i).startsWith(expected), "case " + cases.get(i).spec().replace('\u0001', ' ')
                    + " (seed " + seed + "): expected \"" + expected + "\", got \"" + lines.get(i) + "\"");
        }
    }
}
