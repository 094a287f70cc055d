package dev.jnccl.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.spark.SparkConf;
import org.apache.spark.api.java.JavaSparkContext;

/**
 * A real standalone Spark cluster for the tests, started from the Maven jars: {@code local-cluster[2,2,1024]}
 * runs a Master and two Workers in this JVM, and each Worker forks an executor JVM, as on a cluster.
 * The Workers launch executors from {@code SPARK_HOME}, which surefire names and {@link #start} fills
 * (a {@code RELEASE} file, {@code conf/log4j2.properties}, an empty {@code jars} folder: the executors
 * get this JVM's class path); surefire also sets {@code SPARK_SCALA_VERSION} and {@code SPARK_LOCAL_IP}.
 * Everything binds to 127.0.0.1; the executors run jnccl on the host emulation. Each executor's
 * output (its jnccl log lines, a failed rank's stack trace) is in
 * {@code spark/target/spark-home/work/app-*}{@code /<executor>/stderr}.
 */
final class LocalCluster {
    /** Executor JVMs of the cluster. */
    static final int EXECUTORS = 2;

    private final JavaSparkContext spark;
    private final Set<String> shmBefore;

    private LocalCluster(JavaSparkContext spark, Set<String> shmBefore) {
        this.spark = spark;
        this.shmBefore = shmBefore;
    }

    /**
     * Starts the cluster and waits for both executors to register.
     *
     * @param name     the application's name
     * @param settings further Spark settings, as {@code key=value}
     */
    static LocalCluster start(String name, String... settings) throws IOException, InterruptedException {
        Set<String> shmBefore = shmSegments();
        fakeSparkHome();
        List<String> all = new ArrayList<>(List.of("spark.executor.memory=768m",
                "spark.executor.extraClassPath=" + System.getProperty("java.class.path"),
                // The executors' backend (the emulation: no GPU here); Spark 4.2 itself passes them
                // --enable-native-access=ALL-UNNAMED and --sun-misc-unsafe-memory-access=allow.
                "spark.executor.extraJavaOptions=-Djnccl.backend=host"
                        + " -Dslf4j.provider=org.apache.logging.slf4j.SLF4JServiceProvider",
                // Barrier stages retry up to this many attempts (spark.task.maxFailures does not apply).
                "spark.stage.maxConsecutiveAttempts=2"));
        all.addAll(List.of(settings));
        SparkConf conf = LocalSpark.conf("local-cluster[" + EXECUTORS + ",2,1024]", name, all.toArray(String[]::new));
        LocalCluster cluster = new LocalCluster(new JavaSparkContext(conf), shmBefore);
        cluster.awaitExecutors();
        return cluster;
    }

    JavaSparkContext spark() {
        return spark;
    }

    /** Waits for both executors to register: a barrier stage submitted before waits 15 s per check. */
    void awaitExecutors() throws InterruptedException {
        Duration limit = Duration.ofSeconds(120);
        long deadline = System.nanoTime() + limit.toNanos();
        while (spark.sc().statusTracker().getExecutorInfos().length < EXECUTORS + 1) { // + the driver
            assertTrue(System.nanoTime() < deadline, "executors did not register within " + limit);
            Thread.sleep(200);
        }
    }

    /** Stops Spark and checks that every executor process ended and no /dev/shm segment is left. */
    void stop() throws Exception {
        List<ProcessHandle> executors = ProcessHandle.current().descendants().toList();
        spark.stop();
        for (ProcessHandle executor : executors) {
            executor.onExit().get(60, TimeUnit.SECONDS);
        }
        Set<String> left = shmSegments();
        left.removeAll(shmBefore);
        left.removeIf(LocalCluster::mappedByAnotherProcess);
        assertEquals(Set.of(), left, "/dev/shm segments left by the executors");
    }

    /**
     * Whether a live process maps {@code /dev/shm/name}: another user of the emulation on this
     * machine (ours have all ended), whose segment is none of the executors'.
     */
    private static boolean mappedByAnotherProcess(String name) {
        try (Stream<Path> processes = Files.list(Path.of("/proc"))) {
            return processes.filter(p -> p.getFileName().toString().chars().allMatch(Character::isDigit))
                    .anyMatch(p -> maps(p.resolve("maps"), "/dev/shm/" + name));
        } catch (IOException e) {
            return false;
        }
    }

    private static boolean maps(Path maps, String file) {
        try (Stream<String> lines = Files.lines(maps)) {
            return lines.anyMatch(line -> line.contains(file));
        } catch (IOException | java.io.UncheckedIOException e) {
            return false; // the process ended, or is not ours to read
        }
    }

    /** {@code SPARK_HOME} as the Workers' launcher code needs it (surefire names the folder). */
    static Path sparkHome() {
        String home = System.getenv("SPARK_HOME");
        assertTrue(home != null && "2.13".equals(System.getenv("SPARK_SCALA_VERSION")), "SPARK_HOME (" + home
                + ") and SPARK_SCALA_VERSION=2.13 must be set (jnccl-spark's surefire configuration does)");
        return Path.of(home);
    }

    private static void fakeSparkHome() throws IOException {
        Path root = sparkHome();
        Files.createDirectories(root.resolve("conf"));
        Files.createDirectories(root.resolve("jars")); // the executors get the test's class path instead
        Files.writeString(root.resolve("RELEASE"), "Spark " + org.apache.spark.package$.MODULE$.SPARK_VERSION()
                + " (a SPARK_HOME of jnccl-spark's tests: Maven's jars, no distribution)\n");
        try (var log4j = LocalCluster.class.getResourceAsStream("/log4j2.properties")) {
            Files.write(root.resolve("conf/log4j2.properties"), log4j.readAllBytes());
        }
    }

    private static Set<String> shmSegments() throws IOException {
        try (Stream<Path> entries = Files.list(Path.of("/dev/shm"))) {
            Set<String> names = new TreeSet<>();
            entries.map(p -> p.getFileName().toString()).filter(n -> n.startsWith("jnccl-")).forEach(names::add);
            return names;
        }
    }
}
