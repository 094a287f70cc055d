package dev.jnccl.examples;

import dev.jnccl.Backend;
import dev.jnccl.JncclRuntime;
import dev.jnccl.cuda.Cuda;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What the example programs and the benchmarks ({@code dev.jnccl.examples.bench}) share: command-line
 * options and sizes, the default number of GPUs, and the texts of sizes, backends and failures.
 */
public final class ExampleSupport {
    private static final Logger LOG = LoggerFactory.getLogger(ExampleSupport.class);
    /** Exit status for a bad command line. */
    static final int EXIT_USAGE = 2;
    /** Exit status when jnccl failed (communication error, abort, missing libraries). */
    static final int EXIT_ERROR = 3;

    private ExampleSupport() {}

    /** A bad command line; the message says what was wrong. */
    static final class UsageException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }

    /**
     * {@code --name value} options and {@code --flag} switches, checked against the names the
     * program knows; {@code --name=value} works too.
     */
    static final class Options {
        private final Map<String, String> values = new HashMap<>();

        Options(String[] args, Set<String> valued, Set<String> flags) {
            for (int i = 0; i < args.length; i++) {
                String arg = args[i];
                if (!arg.startsWith("--")) {
                    throw new UsageException("unexpected argument '" + arg + "'");
                }
                String name = arg;
                String value = null;
                int eq = arg.indexOf('=');
                if (eq > 0) {
                    name = arg.substring(0, eq);
                    value = arg.substring(eq + 1);
                }
                if (flags.contains(name)) {
                    if (value != null) {
                        throw new UsageException(name + " takes no value");
                    }
                    values.put(name, "true");
                } else if (valued.contains(name)) {
                    if (value == null) {
                        if (i + 1 >= args.length) {
                            throw new UsageException(name + " needs a value");
                        }
                        value = args[++i];
                    }
                    values.put(name, value);
                } else {
                    throw new UsageException("unknown option '" + name + "'");
                }
            }
        }

        boolean has(String name) {
            return values.containsKey(name);
        }

        boolean flag(String name) {
            return values.containsKey(name);
        }

        /** The text of a valued option, or null. */
        String value(String name) {
            return values.get(name);
        }

        long longValue(String name, long defaultValue, long min, long max) {
            String text = values.get(name);
            if (text == null) {
                return defaultValue;
            }
            long value;
            try {
                value = parseSize(text);
            } catch (NumberFormatException e) {
                throw new UsageException(name + ": '" + text + "' is not a number");
            }
            if (value < min || value > max) {
                throw new UsageException(name + ": " + value + " out of range [" + min + ", " + max + "]");
            }
            return value;
        }

        int intValue(String name, int defaultValue, int min, int max) {
            return (int) longValue(name, defaultValue, min, max);
        }

        /** A number with an optional binary suffix: 4096, 64K, 1M, 1G (KiB, MiB, GiB). */
        private static long parseSize(String text) {
            String t = text.trim().toUpperCase(java.util.Locale.ROOT);
            if (t.endsWith("IB")) {
                t = t.substring(0, t.length() - 2);
            } else if (t.endsWith("B") && t.length() > 1 && Character.isLetter(t.charAt(t.length() - 2))) {
                t = t.substring(0, t.length() - 1);
            }
            long unit = binaryUnit(t);
            if (unit != 1) {
                t = t.substring(0, t.length() - 1);
            }
            return Math.multiplyExact(Long.parseLong(t), unit);
        }
    }

    /**
     * The multiplier of a size's binary suffix: 2^10, 2^20 or 2^30 when {@code size} ends in K, M or
     * G (either case), else 1 (no suffix).
     *
     * @param size a size as written on a command line, e.g. 64K
     * @return the multiplier its last character stands for
     */
    public static long binaryUnit(String size) {
        if (size.isEmpty()) {
            return 1;
        }
        return switch (Character.toUpperCase(size.charAt(size.length() - 1))) {
            case 'K' -> 1L << 10;
            case 'M' -> 1L << 20;
            case 'G' -> 1L << 30;
            default -> 1;
        };
    }

    /**
     * The backend as the programs print it: {@code cuda} or {@code host}, as the {@code jnccl.backend}
     * setting and jnccl's log lines spell it.
     *
     * @param backend the backend
     * @return its lower-case name
     */
    public static String backendName(Backend backend) {
        return backend.name().toLowerCase(java.util.Locale.ROOT);
    }

    /** "host emulation" or "cuda", for the programs' header lines. */
    static String describe(Backend backend) {
        return backend == Backend.HOST ? "host emulation" : "cuda";
    }

    /**
     * The number of ranks when the user gave none: every visible device on real GPUs, at most
     * {@code hostCap} on the host emulation (its 8 virtual devices are host threads on however few
     * cores the machine has).
     */
    static int defaultGpus(int hostCap) {
        JncclRuntime runtime = JncclRuntime.query();
        int visible = runtime.deviceCount();
        if (visible <= hostCap) {
            return visible;
        }
        if (runtime.backend() == Backend.HOST) {
            LOG.info("host emulation: using {} of its {} virtual devices (choose with --gpus / --world)", hostCap,
                    visible);
            return hostCap;
        }
        return visible;
    }

    /** Checks a requested number of GPUs against the visible devices. */
    static int checkGpus(String option, int requested) {
        int visible = Cuda.deviceCount();
        if (requested > visible) {
            throw new UsageException(option + " " + requested + ": only " + visible + " device(s) visible");
        }
        return requested;
    }

    /**
     * A size in binary units: 12 B, 11.7 KiB, 1 MiB, 1 GiB.
     *
     * @param bytes the size in bytes
     * @return the size with its unit
     */
    public static String bytes(long bytes) {
        if (bytes < 1024) {
            return bytes + " B";
        }
        int unit = Math.min((63 - Long.numberOfLeadingZeros(bytes)) / 10, 4);
        double value = bytes / (double) (1L << (10 * unit));
        String number = value == Math.rint(value) ? String.valueOf((long) value)
                : String.format(java.util.Locale.ROOT, "%.1f", value);
        return number + " " + List.of("B", "KiB", "MiB", "GiB", "TiB").get(unit);
    }

    /**
     * The failure and the failures attached to it (other ranks'), one per line.
     *
     * @param t the failure
     * @return its text, then one {@code also:} line per suppressed failure
     */
    public static String describeFailure(Throwable t) {
        StringBuilder text = new StringBuilder(t.toString());
        for (Throwable s : t.getSuppressed()) {
            text.append("\n  also: ").append(s);
        }
        return text.toString();
    }
}
