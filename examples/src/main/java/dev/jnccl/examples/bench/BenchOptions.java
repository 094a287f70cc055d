package dev.jnccl.examples.bench;

import dev.jnccl.CommunicatorMode;
import dev.jnccl.ReduceOp;
import dev.jnccl.examples.ExampleSupport;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The benchmark's command line: nccl-tests' flags ({@code -b -e -i -f -g -w -n -d -o -r -c -a},
 * {@code -R -J}; long forms as nccl-tests spells them) plus {@code --launcher}, {@code --transport},
 * {@code --json}, {@code --svg}. Defaults are nccl-tests' except {@code -a} (3: the maximum over
 * ranks). Bad input is a {@link UsageException} naming the flag and value.
 *
 * @param op          the operation (first argument)
 * @param minBytes    {@code -b}
 * @param maxBytes    {@code -e}
 * @param stepBytes   {@code -i}, used when {@code stepFactor} is 1
 * @param stepFactor  {@code -f}
 * @param ranks       {@code -g}: ranks in this process (threads mode); 1 per process under MPI
 * @param warmup      {@code -w}
 * @param iterations  {@code -n}
 * @param graphLaunches {@code -G}: 0 runs the timed operations one by one; N captures the {@code -n}
 *                    operations into a CUDA graph once and times N launches of it ({@code Communicator.launch})
 * @param types       {@code -d} (all: every type)
 * @param ops         {@code -o} (all: every operation)
 * @param root        {@code -r}
 * @param checks      {@code -c}: check repetitions per size (0: no check)
 * @param average     {@code -a}: how ranks' times combine: 0 rank 0, 1 mean, 2 min, 3 max
 * @param register    {@code -R}: 0 no registration, 1 the buffers registered with every rank's communicator
 *                    (ncclCommRegister); as in nccl-tests the buffers come from ncclMemAlloc either way
 * @param launcher    {@code --launcher}: threads or mpi
 * @param mode        {@code --mode}: the communicators' {@link CommunicatorMode}
 * @param transports  {@code --transport}: nccl, memcpy, or both comma-separated (one run each)
 * @param json        {@code --json} / {@code -J}: file, or null
 * @param svg         {@code --svg}: file, or null
 * @param args        the command line as given
 */
record BenchOptions(CollectiveOp op, long minBytes, long maxBytes, long stepBytes, long stepFactor, int ranks,
                    int warmup, int iterations, int graphLaunches, List<BenchType> types, List<ReduceOp> ops, int root, int checks,
                    int average, int register, String launcher, CommunicatorMode mode, List<String> transports, String json, String svg, List<String> args) {

    /** A bad command line; the message says what was wrong. */
    static final class UsageException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }

    /** Thrown for {@code -h}: print the usage and exit 0. */
    static final class HelpRequested extends RuntimeException {
        private static final long serialVersionUID = 1L;

        HelpRequested() {
            super("help", null, false, false);
        }
    }

    private static final String[] OP_NAMES = {"sum", "prod", "max", "min", "avg"};
    private static final ReduceOp[] OP_VALUES = {ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN, ReduceOp.AVG};

    /** Short flag to long name, as nccl-tests spells them. */
    private static final Map<String, String> FLAGS = new LinkedHashMap<>();

    static {
        String[][] pairs = {{"-b", "minbytes"}, {"-e", "maxbytes"}, {"-i", "stepbytes"}, {"-f", "stepfactor"},
            {"-g", "ngpus"}, {"-t", "nthreads"}, {"-w", "warmup_iters"}, {"-n", "iters"}, {"-d", "datatype"},
            {"-o", "op"}, {"-r", "root"}, {"-c", "check"}, {"-a", "average"}, {"-G", "cudagraph"}, {"-R", "local_register"},
            {"-J", "output_file"}};
        for (String[] pair : pairs) {
            FLAGS.put(pair[0], pair[1]);
        }
    }

    /** nccl-tests' name of a reduction ({@code redop} column). */
    static String opName(ReduceOp op) {
        return OP_NAMES[Arrays.asList(OP_VALUES).indexOf(op)];
    }

    static String usage() {
        return """
                usage: bench.sh OP [flags]      OP: %s
                  nccl-tests' flags (same defaults except -a):
                  -b,--minbytes N      smallest size in bytes (suffixes K M G; default 32M)
                  -e,--maxbytes N      largest size (default 32M)
                  -f,--stepfactor N    multiply the size by N (default 1: add -i instead)
                  -i,--stepbytes N     add N bytes (default 1M), when -f is 1
                  -g,--ngpus N         ranks in this process (threads launcher; default 1)
                  -w,--warmup_iters N  untimed operations per size before the timed ones (default 1)
                  -n,--iters N         timed operations per size (default 20)
                  -G,--cudagraph N     capture the -n operations into a CUDA graph and time N launches of it
                                       (default 0: no graph; not with --transport memcpy)
                  -d,--datatype T      int8 uint8 int32 uint32 int64 uint64 half float double bfloat16
                                       f8e4m3 f8e5m2, or all (default float)
                  -o,--op OP           sum prod max min avg, or all (default sum)
                  -r,--root N          root rank of rooted operations (default 0)
                  -c,--check N         check N times per size, every element against a Java reference (default 1; 0: off)
                  -a,--average N       combine ranks' times: 0 rank 0, 1 mean, 2 min, 3 max (default 3; nccl-tests: 1)
                  -R,--local_register N  0: buffers from ncclMemAlloc, not registered (default); 1: also registered
                                       with each rank's communicator (ncclCommRegister); nccl-tests' 2 (symmetric
                                       windows) is not in jnccl's API
                  -J,--output_file F   same as --json F
                  jnccl's flags:
                  --launcher L         threads (one JVM thread per rank; default) or mpi (one process per rank)
                  --mode M             blocking_split (default) or non_blocking: the CommunicatorMode
                  --transport T        nccl (default), memcpy (threads mode's copy-engine all-gather,
                                       send/recv and all-to-all), or nccl,memcpy (one run each)
                  --json F             results as JSON (nccl-tests' -J layout; several runs: an array)
                  --svg F              bus bandwidth against size, one line per run, transport and placement"""
                .formatted(String.join(" ", CollectiveOp.names()));
    }

    static BenchOptions parse(String... argv) {
        List<String> args = List.of(argv);
        if (argv.length == 0) {
            throw new UsageException("missing OP");
        }
        Map<String, String> values = new LinkedHashMap<>();
        String opName = null;
        for (int i = 0; i < argv.length; i++) {
            String arg = argv[i];
            if (arg.equals("-h") || arg.equals("--help")) {
                throw new HelpRequested();
            }
            if (!arg.startsWith("-")) {
                if (opName != null) {
                    throw new UsageException("unexpected argument '" + arg + "' (the operation is '" + opName + "')");
                }
                opName = arg;
                continue;
            }
            String name;
            String value = null;
            if (arg.startsWith("--")) {
                name = arg.substring(2);
                int eq = name.indexOf('=');
                if (eq >= 0) {
                    value = name.substring(eq + 1);
                    name = name.substring(0, eq);
                }
                if (!FLAGS.containsValue(name) && !List.of("launcher", "mode", "transport", "json", "svg").contains(name)) {
                    throw new UsageException("unknown option '--" + name + "'");
                }
            } else {
                String flag = arg.length() > 2 ? arg.substring(0, 2) : arg;
                name = FLAGS.get(flag);
                if (name == null) {
                    throw new UsageException("unknown or unsupported option '" + flag + "' (jnccl's benchmark implements "
                            + String.join(" ", FLAGS.keySet()) + ")");
                }
                if (arg.length() > 2) {
                    value = arg.substring(2);
                }
            }
            if (value == null) {
                if (i + 1 >= argv.length) {
                    throw new UsageException("option '" + arg + "' needs a value");
                }
                value = argv[++i];
            }
            values.put(name, value);
        }
        if (opName == null) {
            throw new UsageException("missing OP");
        }
        CollectiveOp op;
        try {
            op = CollectiveOp.byName(opName);
        } catch (IllegalArgumentException e) {
            throw new UsageException(e.getMessage());
        }
        long min = size(values, "minbytes", 32L << 20);
        long max = size(values, "maxbytes", 32L << 20);
        if (min > max) {
            throw new UsageException("-b " + min + " is larger than -e " + max);
        }
        long stepBytes = size(values, "stepbytes", 1L << 20);
        long stepFactor = integer(values, "stepfactor", 1, 1, 1L << 20);
        if (stepFactor == 1 && stepBytes == 0) {
            throw new UsageException("-i 0 with -f 1 never reaches -e");
        }
        if (stepFactor > 1 && min == 0) {
            throw new UsageException("-b 0 with -f " + stepFactor + " never grows (give -b 1 or more)");
        }
        if (integer(values, "nthreads", 1, 1, 1) != 1) {
            throw new UsageException("-t: only 1 thread (jnccl's threads launcher runs one thread per rank: use -g)");
        }
        int ranks = (int) integer(values, "ngpus", 1, 1, 1024);
        int warmup = (int) integer(values, "warmup_iters", 1, 0, 1_000_000);
        int iterations = (int) integer(values, "iters", 20, 1, 1_000_000);
        int graphLaunches = (int) integer(values, "cudagraph", 0, 0, 1_000_000);
        List<BenchType> types = types(values.getOrDefault("datatype", "float"));
        List<ReduceOp> ops = ops(values.getOrDefault("op", "sum"));
        int root = (int) integer(values, "root", 0, 0, 1023);
        int checks = (int) integer(values, "check", 1, 0, 1000);
        int average = (int) integer(values, "average", 3, 0, 3);
        int register = localRegister(values);
        String launcher = values.getOrDefault("launcher", "threads");
        if (!launcher.equals("threads") && !launcher.equals("mpi")) {
            throw new UsageException("--launcher '" + launcher + "': expected threads or mpi");
        }
        CommunicatorMode mode = mode(values.getOrDefault("mode", "blocking_split"));
        List<String> transports = new ArrayList<>();
        for (String t : values.getOrDefault("transport", "nccl").split(",")) {
            if (!op.transports().contains(t)) {
                throw new UsageException("--transport '" + t + "': " + op.ncclTestsName() + " runs on "
                        + String.join(" or ", op.transports().stream().sorted().toList())
                        + (t.equals("memcpy") ? " (threads mode's memcpy paths are all-gather, send/recv and all-to-all)" : ""));
            }
            if (!launcher.equals("threads") && t.equals("memcpy")) {
                throw new UsageException("--transport memcpy needs --launcher threads (it copies between the devices of "
                        + "one process)");
            }
            if (graphLaunches > 0 && t.equals("memcpy")) {
                throw new UsageException("-G " + graphLaunches + " with --transport memcpy: threads mode's copy-engine"
                        + " transport cannot be captured into a CUDA graph (use --transport nccl)");
            }
            if (transports.contains(t)) {
                throw new UsageException("--transport lists '" + t + "' twice");
            }
            transports.add(t);
        }
        String json = values.containsKey("json") ? values.get("json") : values.get("output_file");
        return new BenchOptions(op, min, max, stepBytes, stepFactor, ranks, warmup, iterations, graphLaunches, types, ops, root,
                checks, average, register, launcher, mode, List.copyOf(transports), json, values.get("svg"), args);
    }

    /** The sizes of the sweep, as nccl-tests steps them. */
    List<Long> sizes() {
        List<Long> sizes = new ArrayList<>();
        for (long size = minBytes; size <= maxBytes; size = stepFactor > 1 ? size * stepFactor : size + stepBytes) {
            sizes.add(size);
            if (size > Long.MAX_VALUE / Math.max(stepFactor, 2)) {
                break;
            }
        }
        return sizes;
    }

    /** The reductions the table runs: {@code -o} for operations with a redop column, else none (one pass). */
    List<ReduceOp> opsToRun() {
        return op.redopColumn() ? ops : List.of(ReduceOp.SUM);
    }

    /**
     * {@code -R}: nccl-tests' 0 (no registration) and 1 (ncclCommRegister); its 2, symmetric window
     * registration (ncclCommWindowRegister), is refused by name because jnccl has no window API, and a
     * silent fallback would publish a figure under a mode that did not run.
     */
    private static int localRegister(Map<String, String> values) {
        long value = integer(values, "local_register", 0, Long.MIN_VALUE, Long.MAX_VALUE);
        if (value == 2) {
            throw new UsageException("--local_register 2: symmetric window registration (nccl-tests' -R 2, "
                    + "ncclCommWindowRegister) is not supported by jnccl; allowed range [0, 1]");
        }
        if (value < 0 || value > 1) {
            throw new UsageException(String.format(Locale.ROOT, "--local_register %d: out of range [0, 1]", value));
        }
        return (int) value;
    }

    private static List<BenchType> types(String name) {
        if (name.equals("all")) {
            return List.of(BenchType.values());
        }
        try {
            return List.of(BenchType.byName(name));
        } catch (IllegalArgumentException e) {
            throw new UsageException("-d '" + name + "': unknown datatype (int8 uint8 int32 uint32 int64 uint64 half "
                    + "float double bfloat16 f8e4m3 f8e5m2 all)");
        }
    }

    private static List<ReduceOp> ops(String name) {
        if (name.equals("all")) {
            return List.of(OP_VALUES);
        }
        int index = Arrays.asList(OP_NAMES).indexOf(name);
        if (index < 0) {
            throw new UsageException("-o '" + name + "': unknown reduction (sum prod max min avg all"
                    + (name.equals("mulsum") ? "; mulsum, NCCL's pre-multiplied sum, is not in jnccl's API" : "") + ")");
        }
        return List.of(OP_VALUES[index]);
    }

    /** A size like nccl-tests': a number, optionally fractional, with an optional K, M or G (binary) suffix. */
    private static CommunicatorMode mode(String text) {
        for (CommunicatorMode mode : CommunicatorMode.values()) {
            if (mode.name().equalsIgnoreCase(text)) {
                return mode;
            }
        }
        throw new UsageException("--mode '" + text + "': expected blocking_split or non_blocking");
    }

    private static long size(Map<String, String> values, String name, long defaultValue) {
        String text = values.get(name);
        if (text == null) {
            return defaultValue;
        }
        String t = text.trim();
        long unit = ExampleSupport.binaryUnit(t);
        if (unit != 1) {
            t = t.substring(0, t.length() - 1);
        }
        double number;
        try {
            number = Double.parseDouble(t);
        } catch (NumberFormatException e) {
            throw new UsageException("--" + name + " '" + text + "': not a size (e.g. 8, 64K, 1.5M, 1G)");
        }
        double bytes = number * unit;
        if (!(bytes >= 0) || bytes > (double) (1L << 50)) {
            throw new UsageException("--" + name + " '" + text + "': out of range [0, 1P]");
        }
        return (long) bytes;
    }

    private static long integer(Map<String, String> values, String name, long defaultValue, long min, long max) {
        String text = values.get(name);
        if (text == null) {
            return defaultValue;
        }
        long value;
        try {
            value = Long.decode(text.trim());
        } catch (NumberFormatException e) {
            throw new UsageException("--" + name + " '" + text + "': not an integer");
        }
        if (value < min || value > max) {
            throw new UsageException(String.format(Locale.ROOT, "--%s %d: out of range [%d, %d]", name, value, min, max));
        }
        return value;
    }
}
