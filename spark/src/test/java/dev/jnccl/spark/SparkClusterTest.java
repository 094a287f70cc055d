package dev.jnccl.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.DType;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.examples.RingAllToAll;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.SparkException;
import org.apache.spark.api.java.JavaSparkContext;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Spark barrier mode on a real standalone cluster ({@link LocalCluster}: a Master and two Workers in
 * this JVM, two executor JVMs, started from the Maven jars): four ranks as tasks of two executor
 * processes, meeting on the host emulation through {@code /dev/shm} (so on this one machine). Every
 * executor process has ended and no segment is left in {@code /dev/shm} when the class is done.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class SparkClusterTest {
    private static final int TASKS = 4;
    private static LocalCluster cluster;
    private static JavaSparkContext spark;
    /** Where the ranks of the executor processes leave what the test reads (this one machine). */
    private static Path records;

    @BeforeAll
    static void startCluster() throws Exception {
        records = Files.createTempDirectory("jnccl-spark-cluster-");
        cluster = LocalCluster.start("jnccl-spark-cluster-test");
        spark = cluster.spark();
    }

    @BeforeEach
    void bothExecutorsUp() throws InterruptedException {
        cluster.awaitExecutors(); // a scenario may have lost one (Spark replaces it)
    }

    @AfterAll
    static void stopCluster() throws Exception {
        if (cluster != null) {
            cluster.stop();
        }
    }

    @Test
    void theExampleAndEveryOperationAcrossTwoExecutorProcesses() {
        long seed = System.nanoTime();
        List<String> results = SparkCommunicators.run(spark, TASKS, SparkOptions.defaults(), comm -> {
            new SparkCommunicatorsTest.RankChecks(comm, seed).all();
            byte[] example = RingAllToAll.runRank(comm, 10_000, 3);
            List<byte[]> all = comm.allGatherBytesHost(example);
            int status = comm.rank() == 0 ? RingAllToAll.report(all, 10_000, 1) : 0;
            return ProcessHandle.current().pid() + " " + comm.device() + " " + status;
        });
        Set<String> pids = new HashSet<>();
        Set<String> placements = new HashSet<>();
        for (String result : results) {
            String[] parts = result.split(" ");
            pids.add(parts[0]);
            placements.add(parts[0] + "/" + parts[1]);
            assertEquals("0", parts[2], "the example's report on rank 0 (seed " + seed + "): " + results);
        }
        assertEquals(2, pids.size(), "ranks in two executor processes: " + results);
        assertTrue(!pids.contains(Long.toString(ProcessHandle.current().pid())), "no rank in the driver: " + results);
        assertEquals(TASKS, placements.size(), "each rank its own device on the machine: " + results);
        assertEquals(Set.of("0", "1", "2", "3"), Set.copyOf(results.stream().map(r -> r.split(" ")[1]).toList()),
                "devices = the tasks' indices on the machine, across executors: " + results);
    }

    @Test
    void aFailedAttemptEndsItsPeersPromptlyAndTheRetrySucceeds() throws Exception {
        String dir = Files.createTempDirectory(records, "retry-").toString();
        List<Long> results = SparkCommunicators.run(spark, TASKS, SparkOptions.defaults(), comm -> {
            if (BarrierTaskContext.get().stageAttemptNumber() == 0) {
                failFirstAttempt(comm, dir);
            }
            long[] all = comm.allGatherLongsHost(ProcessHandle.current().pid() * 10 + comm.rank());
            return all[(comm.rank() + 1) % all.length];
        });
        for (int rank = 0; rank < TASKS; rank++) {
            assertEquals((rank + 1) % TASKS, results.get(rank) % 10, "retry, rank " + rank + ": " + results);
        }
        long thrown = awaitRecord(dir, "thrown");
        for (int rank : new int[] {0, 2, 3}) {
            long ended = awaitRecord(dir, "aborted " + rank);
            System.out.println("cluster: rank " + rank + " ended " + (ended - thrown) + " ms after rank 1 threw");
            assertTrue(ended - thrown < 10_000, "rank " + rank + " ended " + (ended - thrown) + " ms after the throw");
        }
    }

    /** Rank 1 throws, the others wait in a barrier it never joins and record when their wait ended. */
    private static void failFirstAttempt(dev.jnccl.Communicator comm, String dir) {
        if (comm.rank() == 1) {
            record(dir, "thrown");
            throw new IllegalStateException("the test's planned failure of rank 1 in the first attempt");
        }
        try {
            comm.barrier();
        } catch (RuntimeException e) {
            record(dir, "aborted " + comm.rank());
            throw e;
        }
    }

    @Test
    void anExecutorThatDiesMidStageIsReplacedAndTheRetrySucceeds() throws Exception {
        String dir = Files.createTempDirectory(records, "halt-").toString();
        List<Integer> results = SparkCommunicators.run(spark, TASKS, SparkOptions.defaults(), comm -> {
            if (BarrierTaskContext.get().stageAttemptNumber() == 0) {
                haltRank1sExecutor(comm, dir);
            }
            return (int) comm.allGatherLongsHost(comm.rank() + 100)[(comm.rank() + 1) % TASKS];
        });
        assertEquals(List.of(101, 102, 103, 100), results, "the retry on the replacement executor");
        String halted = Files.readString(Path.of(dir, "pid 1"));
        long halting = awaitRecord(dir, "halting");
        for (int rank : new int[] {0, 2, 3}) {
            if (!Files.readString(Path.of(dir, "pid " + rank)).equals(halted)) { // a survivor
                long ended = awaitRecord(dir, "aborted " + rank);
                System.out.println("cluster: rank " + rank + " ended " + (ended - halting) + " ms after its peer's"
                        + " executor halted");
                assertTrue(ended - halting < 10_000, "rank " + rank + " ended " + (ended - halting) + " ms after");
            }
        }
    }

    /** Rank 1 halts its executor's JVM while the others wait for it in a barrier (each records its pid). */
    private static void haltRank1sExecutor(dev.jnccl.Communicator comm, String dir) throws InterruptedException {
        writeRecord(dir, "pid " + comm.rank(), Long.toString(ProcessHandle.current().pid()));
        if (comm.rank() == 1) {
            Thread.sleep(300); // the others are in the barrier by now
            record(dir, "halting");
            Runtime.getRuntime().halt(137);
        }
        try {
            comm.barrier();
        } catch (RuntimeException e) {
            record(dir, "aborted " + comm.rank());
            throw e;
        }
    }

    @Test
    void anAlwaysFailingRankIsNamedFirstInTheDriversException() {
        String planned = "the test's planned failure of rank 2 in every attempt, " + System.nanoTime();
        SparkException e = assertThrows(SparkException.class, () -> SparkCommunicators.run(spark, TASKS,
                SparkOptions.defaults(), comm -> {
                    if (comm.rank() == 2) {
                        Thread.sleep(200); // its peers are in the barrier: their aborts follow its throw closely
                        throw new IllegalStateException(planned);
                    }
                    comm.barrier();
                    return comm.rank();
                }));
        String message = String.valueOf(e.getMessage());
        System.out.println("cluster: the driver's exception: " + message.lines().findFirst().orElse("")
                + (e.getCause() instanceof SparkException spark ? "; Spark reported first: "
                + String.valueOf(spark.getMessage()).lines().findFirst().orElse("") : "; Spark reported it first"));
        assertTrue(message.startsWith("rank 2 failed: java.lang.IllegalStateException: " + planned), message);
    }

    @Test
    void twoExecutorsOfOneMachineOnOneDeviceAreRefusedNamingRanksAndExecutors() {
        SparkException e = assertThrows(SparkException.class, () -> SparkCommunicators.run(spark, TASKS,
                SparkOptions.defaults().withDevice(0), dev.jnccl.Communicator::rank));
        String message = String.valueOf(e.getMessage());
        assertTrue(message.contains("ranks [0, 1, 2, 3] (executors [") && message.contains("share device 0")
                && message.contains("spark.task.resource.gpu.amount=1"), message);
    }

    @Test
    void aCancelledJobEndsEveryRankPromptly() throws Exception {
        String dir = Files.createTempDirectory(records, "cancel-").toString();
        String group = "jnccl-cluster-cancel";
        Thread driver = Thread.ofPlatform().name("cluster-cancel-driver").start(() -> {
            spark.setJobGroup(group, "a stuck collective across executors", true);
            assertThrows(SparkException.class, () -> SparkCommunicators.run(spark, TASKS, SparkOptions.defaults(),
                    comm -> stuckAllReduce(comm, dir)));
        });
        for (int rank = 1; rank < TASKS; rank++) {
            awaitRecord(dir, "in " + rank);
        }
        Thread.sleep(300);
        long cancelled = System.currentTimeMillis();
        spark.cancelJobGroup(group);
        assertTrue(driver.join(Duration.ofSeconds(60)), "the job did not end after its cancel");
        for (int rank = 1; rank < TASKS; rank++) {
            long ended = awaitRecord(dir, "ended " + rank);
            System.out.println("cluster: rank " + rank + " ended " + (ended - cancelled) + " ms after the cancel");
            assertTrue(ended - cancelled < 10_000, "rank " + rank + " ended " + (ended - cancelled) + " ms after");
        }
    }

    /** Rank 0 never joins; the others wait in an all-reduce until Spark kills them. */
    private static int stuckAllReduce(dev.jnccl.Communicator comm, String dir) throws InterruptedException {
        if (comm.rank() == 0) {
            Thread.sleep(120_000);
            return 0;
        }
        try (CudaStream stream = CudaStream.create(); DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 16)) {
            record(dir, "in " + comm.rank());
            comm.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM, stream);
            comm.synchronize();
        } catch (RuntimeException e) {
            record(dir, "ended " + comm.rank());
            throw e;
        }
        return 1;
    }

    @Test
    void aBarrierStageWithJncclBesideTheSameStageWithSparkAlone() {
        // Figures for docs/spark.md, printed (no timed assertion): a stage that creates, uses once and
        // closes the communicators, beside one whose tasks meet once through Spark's allGather.
        for (int round = 0; round < 2; round++) {
            long t0 = System.nanoTime();
            List<long[]> jnccl = SparkCommunicators.run(spark, TASKS, SparkOptions.defaults(), comm -> {
                comm.barrier();
                return comm.allGatherLongsHost(comm.rank() * 3L + 1);
            });
            long t1 = System.nanoTime();
            List<String> alone = sparkAloneStage(TASKS);
            long t2 = System.nanoTime();
            for (int rank = 0; rank < TASKS; rank++) {
                assertArrayEquals(new long[] {1, 4, 7, 10}, jnccl.get(rank), "rank " + rank + "'s gather");
                assertEquals("0,1,2,3", alone.get(rank), "task " + rank + "'s Spark allGather");
            }
            System.out.printf("cluster: barrier stage of %d tasks end to end: with jnccl (create, barrier, host"
                    + " gather, close) %d ms, Spark alone (one allGather) %d ms%n", TASKS,
                    TimeUnit.NANOSECONDS.toMillis(t1 - t0), TimeUnit.NANOSECONDS.toMillis(t2 - t1));
        }
    }

    /** A barrier stage of {@code tasks} tasks whose tasks meet once through Spark's allGather, results in task order. */
    private static List<String> sparkAloneStage(int tasks) {
        @SuppressWarnings("unchecked")
        scala.reflect.ClassTag<String> string = (scala.reflect.ClassTag<String>) (scala.reflect.ClassTag<?>)
                scala.reflect.ClassTag$.MODULE$.apply(String.class);
        Object gathered = spark.parallelize(java.util.stream.IntStream.range(0, tasks).boxed().toList(), tasks).rdd()
                .barrier().mapPartitions(new SparkAloneTask(), false, string)
                .coalesce(1, true, scala.Option.empty(), null).collect();
        String[] results = new String[tasks];
        for (String result : (String[]) gathered) {
            results[Integer.parseInt(result.substring(0, result.indexOf(':')))] = result.substring(result.indexOf(':') + 1);
        }
        return List.of(results);
    }

    /** One task of {@link #sparkAloneStage}: "partition:every partition's id joined", from one allGather. */
    private static final class SparkAloneTask extends scala.runtime.AbstractFunction1<scala.collection.Iterator<Integer>,
            scala.collection.Iterator<String>> implements java.io.Serializable {
        private static final long serialVersionUID = 1L;

        @Override
        public scala.collection.Iterator<String> apply(scala.collection.Iterator<Integer> partition) {
            BarrierTaskContext context = BarrierTaskContext.get();
            String all = String.join(",", context.allGather(Integer.toString(context.partitionId())));
            return scala.jdk.javaapi.CollectionConverters.asScala(List.of(context.partitionId() + ":" + all).iterator());
        }
    }

    /** Records the wall-clock time of {@code event} (the executors and the driver share this machine's clock). */
    private static void record(String dir, String event) {
        writeRecord(dir, event, Long.toString(System.currentTimeMillis()));
    }

    private static void writeRecord(String dir, String name, String value) {
        try {
            Files.writeString(Path.of(dir, name), value);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** The time an executor recorded for {@code event}, waiting up to 30 s for it. */
    private static long awaitRecord(String dir, String event) throws InterruptedException, IOException {
        Path file = Path.of(dir, event);
        for (int i = 0; i < 300 && !Files.exists(file); i++) {
            Thread.sleep(100);
        }
        assertTrue(Files.exists(file), "no executor recorded '" + event + "' within 30 s");
        return Long.parseLong(Files.readString(file).strip());
    }
}
