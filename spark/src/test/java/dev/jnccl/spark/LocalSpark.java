package dev.jnccl.spark;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import java.util.function.Function;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaSparkContext;

/**
 * What the Spark local-mode tests and programs of this module share: a Spark context of one JVM on
 * the loopback address, and the programs' {@code --name value} command lines.
 */
final class LocalSpark {
    private LocalSpark() {}

    /**
     * A Spark context in this JVM.
     *
     * @param master   {@code local[N]} (N task slots)
     * @param name     the application's name
     * @param settings further Spark settings, as {@code key=value}
     */
    static JavaSparkContext start(String master, String name, String... settings) {
        return new JavaSparkContext(conf(master, name, settings));
    }

    /**
     * The configuration of a test's Spark: on the loopback address, no UI, and {@code settings}
     * ({@code key=value}, later ones winning).
     */
    static SparkConf conf(String master, String name, String... settings) {
        SparkConf conf = new SparkConf().setMaster(master).setAppName(name)
                .set("spark.driver.host", "127.0.0.1").set("spark.driver.bindAddress", "127.0.0.1")
                .set("spark.ui.enabled", "false").set("spark.ui.showConsoleProgress", "false");
        for (String setting : settings) {
            conf.set(setting.substring(0, setting.indexOf('=')), setting.substring(setting.indexOf('=') + 1));
        }
        return conf;
    }

    /** Exit status of the programs for a bad command line. */
    static final int EXIT_USAGE = 2;
    /** Exit status of the programs when jnccl or Spark failed. */
    static final int EXIT_ERROR = 3;

    /** A program's work once its command line is parsed. */
    interface Body {
        /**
         * Runs it.
         *
         * @param options the parsed {@code --name value} options
         * @return the exit status
         * @throws UsageException when an option's value is out of range (before Spark starts)
         */
        int run(Map<String, String> options);
    }

    /**
     * Runs a program of this module: parses {@code args} against {@code names}, prints {@code usage}
     * for {@code --help} (status 0) or after a bad command line (status {@link #EXIT_USAGE}), else runs
     * {@code body}.
     */
    static int program(String name, String usage, String[] args, Set<String> names, Body body) {
        try {
            Map<String, String> options = options(args, names);
            if (options.containsKey("--help")) {
                System.out.println(usage);
                return 0;
            }
            return body.run(options);
        } catch (UsageException e) {
            System.err.println(name + ": " + e.getMessage() + "\n" + usage);
            return EXIT_USAGE;
        }
    }

    /**
     * Runs {@code stage} on a fresh {@code local[tasks]} context, stopped before this returns (so a
     * program's report is its last output).
     *
     * @return what {@code stage} returned, or null after printing a {@code FAILED} line when it threw
     */
    static <T> T stage(int tasks, String name, Function<JavaSparkContext, T> stage) {
        JavaSparkContext spark = start("local[" + tasks + "]", name);
        try {
            return stage.apply(spark);
        } catch (Exception | Error e) { // Spark's SparkException (checked) carries the failed task's exception
            System.out.println("FAILED: " + dev.jnccl.examples.ExampleSupport.describeFailure(e));
            return null;
        } finally {
            spark.stop();
        }
    }

    /** A bad command line; the message says what was wrong. */
    static final class UsageException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        UsageException(String message) {
            super(message);
        }
    }

    /**
     * {@code --name value} (or {@code --name=value}) options among {@code names}, and {@code --help}.
     *
     * @throws UsageException for an unknown option or one without its value
     */
    static Map<String, String> options(String[] args, Set<String> names) {
        Map<String, String> values = new HashMap<>();
        for (int i = 0; i < args.length; i++) {
            String arg = args[i];
            int eq = arg.indexOf('=');
            String name = eq > 0 ? arg.substring(0, eq) : arg;
            if (name.equals("--help")) {
                values.put(name, "");
                continue;
            }
            if (!names.contains(name)) {
                throw new UsageException("unknown option '" + arg + "'");
            }
            if (eq < 0 && i + 1 >= args.length) {
                throw new UsageException(name + " needs a value");
            }
            values.put(name, eq > 0 ? arg.substring(eq + 1) : args[++i]);
        }
        return values;
    }

    /**
     * The number an option gives (binary suffixes K, M, G allowed), else {@code defaultValue}.
     *
     * @throws UsageException when it is not a number in {@code [min, max]}
     */
    static long number(Map<String, String> options, String name, long defaultValue, long min, long max) {
        String text = options.get(name);
        if (text == null) {
            return defaultValue;
        }
        long value;
        try {
            long unit = dev.jnccl.examples.ExampleSupport.binaryUnit(text);
            value = Math.multiplyExact(Long.parseLong(unit == 1 ? text : text.substring(0, text.length() - 1)), unit);
        } catch (NumberFormatException | ArithmeticException e) {
            throw new UsageException(name + ": '" + text + "' is not a number");
        }
        if (value < min || value > max) {
            throw new UsageException(name + ": " + value + " is out of range [" + min + ", " + max + "]");
        }
        return value;
    }
}
