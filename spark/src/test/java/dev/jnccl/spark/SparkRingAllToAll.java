package dev.jnccl.spark;

import dev.jnccl.examples.RingAllToAll;
import java.util.List;
import java.util.Set;

/**
 * jnccl's example program ({@link RingAllToAll}: a destructive all-to-all and a ring exchange, every
 * element checked) in Spark barrier mode: one barrier stage of N tasks in local mode
 * ({@code local[N]}, this JVM), one rank each, through {@link SparkCommunicators#run}. The report
 * ends with {@code OK} when every element matched. Run by
 * {@code scripts/run-example.sh --launcher spark --ranks N [--elements N] [--iterations N]}.
 *
 * <p>It lives in jnccl-spark's test code so that Spark stays off the examples' class path (and the
 * examples off jnccl-spark's users'). Exit status: 0 OK, 1 verification failed, 2 bad command line,
 * 3 jnccl or Spark failed.
 */
public final class SparkRingAllToAll {
    private static final String USAGE = """
            usage: SparkRingAllToAll [--ranks N] [--elements N] [--iterations N]
              --ranks N       barrier tasks (ranks), one device each: task i of the executor on device
                              i mod the visible devices (default 2)
              --elements N    INT32 elements per slot (default 262144; suffixes K, M)
              --iterations N  all-to-all + ring rounds, each checked (default 5)
            exit status: 0 OK, 1 verification failed, 2 bad command line, 3 jnccl or Spark failed""";

    private SparkRingAllToAll() {}

    /**
     * Runs the example and exits with its status.
     *
     * @param args {@code --ranks N} (default 2), {@code --elements N}, {@code --iterations N},
     *             {@code --launcher spark} (what run-example.sh passes on)
     */
    public static void main(String[] args) {
        System.exit(run(args));
    }

    static int run(String[] args) {
        return LocalSpark.program("SparkRingAllToAll", USAGE, args,
                Set.of("--ranks", "--elements", "--iterations", "--launcher"), options -> {
                    if (!options.getOrDefault("--launcher", "spark").equals("spark")) {
                        throw new LocalSpark.UsageException("--launcher " + options.get("--launcher") + ": this"
                                + " program is the Spark launcher's (threads and mpi: dev.jnccl.examples.RingAllToAll)");
                    }
                    int ranks = (int) LocalSpark.number(options, "--ranks", 2, 1, 100);
                    long elements = LocalSpark.number(options, "--elements", 262_144, 1, 1L << 28);
                    int iterations = (int) LocalSpark.number(options, "--iterations", 5, 1, 1_000_000);
                    long started = System.nanoTime();
                    List<byte[]> results = LocalSpark.stage(ranks, "jnccl-ring-all-to-all", spark -> {
                        System.out.println("launcher: Spark " + spark.version() + " barrier mode, local[" + ranks
                                + "]: " + ranks + " task(s) in this JVM, one rank each");
                        System.out.flush();
                        return SparkCommunicators.run(spark, ranks, SparkOptions.defaults(),
                                comm -> RingAllToAll.runRank(comm, elements, iterations));
                    });
                    return results == null ? LocalSpark.EXIT_ERROR
                            : RingAllToAll.report(results, elements, System.nanoTime() - started);
                });
    }
}
