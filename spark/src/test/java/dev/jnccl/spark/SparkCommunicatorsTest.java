package dev.jnccl.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.AllToAllSchedule;
import dev.jnccl.Communicator;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.io.File;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.SparkException;
import org.apache.spark.api.java.JavaSparkContext;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Spark barrier mode in local mode inside the test JVM ({@code local[4]}: four task slots; a failed
 * barrier stage is tried twice, {@code spark.stage.maxConsecutiveAttempts=2}), on whatever backend the build picks (the host emulation without a GPU): every command and
 * convenience operation element by element, the NCCL host side, a split, a failed first attempt
 * and a cancelled job.
 */
class SparkCommunicatorsTest {
    private static JavaSparkContext spark;

    /** The test JVM is the executor in local mode: what the tasks leave here, the test reads. */
    static final Map<String, Long> TIMES = new ConcurrentHashMap<>();
    static final Map<String, Communicator> COMMUNICATORS = new ConcurrentHashMap<>();
    static final Map<Integer, String> ABORTS = new ConcurrentHashMap<>();
    static volatile CountDownLatch inCollective;

    @BeforeAll
    static void startSpark() {
        // Barrier stages retry by stage attempts (spark.task.maxFailures, local[N,F]'s F, does not apply).
        spark = LocalSpark.start("local[4]", "jnccl-spark-test", "spark.stage.maxConsecutiveAttempts=2");
    }

    @AfterAll
    static void stopSpark() {
        if (spark != null) {
            spark.stop();
        }
    }

    @ParameterizedTest(name = "{0} tasks")
    @ValueSource(ints = {1, 2, 3, 4})
    void everyOperationElementByElement(int tasks) {
        long seed = System.nanoTime();
        List<String> results = SparkCommunicators.run(spark, tasks, SparkOptions.defaults(), comm -> {
            new RankChecks(comm, seed).all();
            return "rank " + comm.rank() + " of " + comm.worldSize() + " on device " + comm.device();
        });
        int visible = Cuda.deviceCount();
        for (int rank = 0; rank < tasks; rank++) {
            // local mode: every task on the one executor, device = its index there modulo the visible devices
            assertEquals("rank " + rank + " of " + tasks + " on device " + rank % visible, results.get(rank),
                    "seed " + seed);
        }
    }

    @Test
    void tasksOfOneExecutorOnOneDeviceAreRefusedUnlessNcclAllowsIt() {
        if ("1".equals(System.getenv("NCCL_MULTI_RANK_GPU_ENABLE"))) {
            assertEquals(List.of(0, 0), SparkCommunicators.run(spark, 2, SparkOptions.defaults().withDevice(0),
                    Communicator::device));
            return;
        }
        SparkException e = assertThrows(SparkException.class, () -> SparkCommunicators.run(spark, 2,
                SparkOptions.defaults().withDevice(0), Communicator::device));
        String message = String.valueOf(e.getMessage());
        assertTrue(message.contains("ranks [0, 1] (executors [driver, driver]) on host ")
                && message.contains(" share device 0") && message.contains("spark.task.resource.gpu.amount=1")
                && message.contains("NCCL_MULTI_RANK_GPU_ENABLE"), message);
    }

    @Test
    void aFailedFirstAttemptIsAbortedPromptlyAndTheRetrySucceeds() throws Exception {
        TIMES.clear();
        COMMUNICATORS.clear();
        long fdsBefore = openFds();
        List<Integer> results = SparkCommunicators.run(spark, 3, SparkOptions.defaults(), comm -> {
            int attempt = BarrierTaskContext.get().stageAttemptNumber();
            COMMUNICATORS.put(attempt + "/" + comm.rank(), comm);
            if (attempt == 0 && comm.rank() == 1) {
                TIMES.put("thrown", System.nanoTime());
                throw new IllegalStateException("the test's planned failure of rank 1");
            }
            if (attempt == 0) {
                try {
                    comm.barrier(); // rank 1 never comes: only Spark's kill ends this
                } catch (RuntimeException e) {
                    TIMES.put("aborted " + comm.rank(), System.nanoTime());
                    System.out.println("failed attempt: rank " + comm.rank() + " ended with " + e);
                    throw e;
                }
            }
            comm.barrier();
            return (int) comm.allGatherLongsHost(comm.rank() + 10)[2];
        });
        assertEquals(List.of(12, 12, 12), results);
        assertEndedWithin(10_000, TIMES.get("thrown"), "rank 1 threw", "aborted ", 0, 2);
        for (int rank = 0; rank < 3; rank++) {
            Communicator first = COMMUNICATORS.get("0/" + rank);
            assertTrue(first.isClosed(), "attempt 0, rank " + rank + ": " + first);
            assertTrue(COMMUNICATORS.get("1/" + rank) != first, "the retry builds fresh communicators");
        }
        assertNoJncclThreads();
        assertTrue(waitForFds(fdsBefore), "open file descriptors: " + fdsBefore + " before, " + openFds() + " after");
    }

    @Test
    void theDriversExceptionNamesTheRankThatFailedWithItsOwnException() {
        // Every attempt: rank 1 throws, its peers wait in a barrier until jnccl aborts them. Spark may
        // report a peer's abort first; the exception must still lead with rank 1's own failure.
        String planned = "the test's planned failure of rank 1, seed " + System.nanoTime();
        SparkException e = assertThrows(SparkException.class, () -> SparkCommunicators.run(spark, 3,
                SparkOptions.defaults(), comm -> {
                    if (comm.rank() == 1) {
                        throw new IllegalArgumentException(planned);
                    }
                    comm.barrier();
                    return comm.rank();
                }));
        String message = String.valueOf(e.getMessage());
        assertTrue(message.startsWith("rank 1 failed: java.lang.IllegalArgumentException: " + planned), message);
    }

    @Test
    void aHangIsEndedByTheWatchdogWithThisRanksViewOnly() {
        // Spark's allGather cannot gather the ranks' summaries (every task must make the same barrier
        // calls in order, and a stuck one never does): each rank's diagnosis is its own view.
        ABORTS.clear();
        SparkOptions options = SparkOptions.defaults().withCommunicator(o -> o.withWatchdog(
                java.time.Duration.ofSeconds(2)).withWatchdogInterval(java.time.Duration.ofMillis(200)));
        List<Integer> results = SparkCommunicators.run(spark, 2, options, comm -> {
            if (BarrierTaskContext.get().stageAttemptNumber() == 0) {
                hangOnRank0(comm);
            }
            return comm.rank();
        });
        assertEquals(List.of(0, 1), results, "the retry");
        String reason = String.valueOf(ABORTS.get(1));
        assertTrue(reason.contains("rank 1's view only (no channel to the other ranks)"), reason);
    }

    /** Rank 0 never joins; rank 1's all-reduce waits until its watchdog aborts it (recorded in ABORTS). */
    private static void hangOnRank0(Communicator comm) throws InterruptedException {
        if (comm.rank() == 0) {
            // Spark kills it when rank 1's task fails, without interrupting its thread (a failed barrier
            // stage's kill does not): work outside jnccl must look, or it holds its task slot.
            BarrierTaskContext context = BarrierTaskContext.get();
            for (int i = 0; i < 1200 && !context.isInterrupted(); i++) {
                Thread.sleep(50);
            }
            return;
        }
        try (CudaStream stream = CudaStream.create(); DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 16)) {
            comm.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM, stream);
            comm.synchronize();
        } catch (RuntimeException e) {
            ABORTS.put(comm.rank(), String.valueOf(e.getMessage()));
            throw e;
        }
    }

    @Test
    void aTaskKilledInsideACollectiveEndsItsPeersPromptly() throws Exception {
        TIMES.clear();
        inCollective = new CountDownLatch(2);
        String group = "jnccl-kill-test";
        Thread driver = Thread.ofPlatform().name("kill-test-driver").start(() -> {
            spark.setJobGroup(group, "a stuck collective", true);
            assertThrows(SparkException.class, () -> SparkCommunicators.run(spark, 3, SparkOptions.defaults(),
                    comm -> {
                        if (comm.rank() == 0) {
                            Thread.sleep(120_000); // never joins: the others' all-reduce waits
                            return 0;
                        }
                        try (CudaStream stream = CudaStream.create();
                             DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 16)) {
                            inCollective.countDown();
                            comm.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM, stream);
                            comm.synchronize();
                        } catch (RuntimeException e) {
                            TIMES.put("ended " + comm.rank(), System.nanoTime());
                            System.out.println("cancelled job: rank " + comm.rank() + " ended with " + e);
                            throw e;
                        }
                        return 1;
                    }));
        });
        assertTrue(inCollective.await(60, TimeUnit.SECONDS), "ranks 1 and 2 did not reach the collective");
        Thread.sleep(300);
        long cancelled = System.nanoTime();
        spark.cancelJobGroup(group);
        assertTrue(driver.join(java.time.Duration.ofSeconds(30)), "the job did not end after its cancel");
        assertEndedWithin(5_000, cancelled, "the cancel", "ended ", 1, 2);
        assertNoJncclThreads();
    }

    @Test
    void placementsAndSharedDevices() {
        SparkCommunicators.Placement p = new SparkCommunicators.Placement(3, "aWQ=", "exec,1");
        assertEquals(p, SparkCommunicators.Placement.decode(p.encode()));
        assertEquals("", SparkCommunicators.sharedDevices(List.of(p, new SparkCommunicators.Placement(3, "", "other")),
                List.of("h1", "h2")));
        // Two executors of one machine on one device: NCCL refuses it as it refuses two threads.
        assertEquals("ranks [0, 2] (executors [e, f]) on host h share device 1", SparkCommunicators.sharedDevices(
                List.of(new SparkCommunicators.Placement(1, "", "e"), new SparkCommunicators.Placement(0, "", "e"),
                        new SparkCommunicators.Placement(1, "", "f"), new SparkCommunicators.Placement(1, "", "g")),
                List.of("h", "h", "h", "other")));
        org.apache.spark.BarrierTaskInfo[] tasks = java.util.stream.Stream.of("a:1", "b:1", "a:2", "a:1", "b:2")
                .map(org.apache.spark.BarrierTaskInfo::new).toArray(org.apache.spark.BarrierTaskInfo[]::new);
        assertEquals(List.of("a", "b", "a", "a", "b"), SparkCommunicators.hosts(tasks));
        assertEquals(List.of(0, 0, 1, 2, 1), java.util.stream.IntStream.range(0, tasks.length)
                .mapToObj(rank -> SparkCommunicators.hostIndex(tasks, rank)).toList(),
                "a task's index counts the tasks of every executor of its machine");
        IllegalArgumentException bad = assertThrows(IllegalArgumentException.class,
                () -> SparkCommunicators.parseDevice("-2", "the system property jnccl.device"));
        assertTrue(bad.getMessage().contains("-2") && bad.getMessage().contains("jnccl.device"), bad.getMessage());
        assertThrows(IllegalArgumentException.class, () -> SparkOptions.defaults().withDevice(-2));
        assertThrows(IllegalArgumentException.class, () -> SparkCommunicators.run(spark, 0, SparkOptions.defaults(),
                Communicator::rank));
    }

    /**
     * Each of {@code ranks} recorded (under {@code key + rank}) that its wait ended with an exception,
     * less than {@code limitMillis} after {@code since} (when {@code event} happened).
     */
    private static void assertEndedWithin(long limitMillis, long since, String event, String key, int... ranks)
            throws InterruptedException {
        for (int rank : ranks) {
            Long ended = awaitTime(key + rank);
            assertTrue(ended != null, "rank " + rank + " did not record '" + key + "' (its wait did not end with an"
                    + " exception): " + TIMES);
            long millis = TimeUnit.NANOSECONDS.toMillis(ended - since);
            System.out.println("rank " + rank + " ended " + millis + " ms after " + event);
            assertTrue(millis < limitMillis, "rank " + rank + " ended " + millis + " ms after " + event);
        }
    }

    /** A time a task records; a killed task may still be ending when Spark reports the job. */
    private static Long awaitTime(String key) throws InterruptedException {
        for (int i = 0; i < 100 && !TIMES.containsKey(key); i++) {
            Thread.sleep(100);
        }
        return TIMES.get(key);
    }

    private static void assertNoJncclThreads() throws InterruptedException {
        List<String> left = new ArrayList<>();
        for (int i = 0; i < 50; i++) {
            left.clear();
            Thread.getAllStackTraces().keySet().stream().filter(t -> t.isAlive() && t.getName().startsWith("jnccl"))
                    .forEach(t -> left.add(t.getName()));
            if (left.isEmpty()) {
                return;
            }
            Thread.sleep(100);
        }
        throw new AssertionError("jnccl threads left after the job: " + left);
    }

    private static long openFds() {
        String[] fds = new File("/proc/self/fd").list();
        return fds == null ? 0 : fds.length;
    }

    private static boolean waitForFds(long before) throws InterruptedException {
        for (int i = 0; i < 50; i++) {
            if (openFds() <= before + 2) { // slack for Spark's own lazily opened files
                return true;
            }
            Thread.sleep(100);
        }
        return false;
    }

    /** One rank's checks: every transaction command and convenience operation against a host reference. */
    static final class RankChecks {
        private final Communicator comm;
        private final long seed;
        private final int rank;
        private final int world;

        RankChecks(Communicator comm, long seed) {
            this.comm = comm;
            this.seed = seed;
            this.rank = comm.rank();
            this.world = comm.worldSize();
        }

        /** Rank r's data of {@code count} small integers (exact in FP32 sums), for check {@code check}. */
        float[] data(int r, int check, int count) {
            Random random = new Random(seed * 1_000_003 + check * 101L + r);
            float[] values = new float[count];
            for (int i = 0; i < count; i++) {
                values[i] = random.nextInt(41) - 20;
            }
            return values;
        }

        void all() throws Exception {
            int shard = 5;
            int n = world * shard;
            try (CudaStream stream = CudaStream.create();
                 DeviceMemory a = DeviceMemory.allocate(DType.FP32, n);
                 DeviceMemory b = DeviceMemory.allocate(DType.FP32, n)) {
                DeviceTensor ta = a.tensor(DType.FP32);
                DeviceTensor tb = b.tensor(DType.FP32);
                // Transaction commands.
                int check = 0;
                for (String command : List.of("allReduce", "reduceScatter", "allGather", "broadcast", "ring",
                        "allToAll", "destructiveAllToAll")) {
                    check++;
                    if (command.equals("ring") && world == 1) {
                        continue;
                    }
                    upload(a, data(rank, check, n));
                    upload(b, new float[n]);
                    var transaction = comm.begin(stream);
                    switch (command) {
                        case "allReduce" -> transaction.allReduce(ta, ReduceOp.SUM);
                        case "reduceScatter" -> transaction.reduceScatter(ta, ReduceOp.SUM);
                        case "allGather" -> transaction.allGather(ta.slice(rank * shard, shard), tb);
                        case "broadcast" -> transaction.broadcast(ta, world - 1);
                        case "ring" -> transaction.send(ta, (rank + 1) % world).recv(tb, (rank + world - 1) % world);
                        case "allToAll" -> transaction.allToAll(ta, tb);
                        default -> transaction.destructiveAllToAll(ta);
                    }
                    transaction.execute(null);
                    comm.waitOnComms(stream);
                    stream.synchronize();
                    compare(command, expected(command, check, n, shard), download(
                            command.equals("allGather") || command.equals("ring") || command.equals("allToAll") ? b : a,
                            n), command.equals("reduceScatter") ? rank * shard : 0,
                            command.equals("reduceScatter") ? shard : n);
                }
                // Convenience operations.
                check++;
                upload(a, data(rank, check, n));
                comm.allReduce(ta, ReduceOp.MAX, stream);
                stream.synchronize();
                compare("allReduce MAX", reduce(check, n, Math::max), download(a, n), 0, n);
                check++;
                upload(a, data(rank, check, n));
                comm.reduceMean(ta, stream);
                stream.synchronize();
                float[] mean = reduce(check, n, Float::sum);
                for (int i = 0; i < n; i++) {
                    mean[i] /= world;
                }
                compareApprox("reduceMean", mean, download(a, n));
                check++;
                upload(a, data(rank, check, n));
                comm.reduceScatter(ta, stream);
                stream.synchronize();
                compare("reduceScatter (convenience)", reduce(check, n, Float::sum), download(a, n), rank * shard, shard);
                check++;
                upload(a, data(rank, check, n));
                comm.broadcast(ta, 0, stream);
                stream.synchronize();
                compare("broadcast (convenience)", data(0, check, n), download(a, n), 0, n);
                check++;
                upload(a, data(rank, check, n));
                comm.allToAll(ta, tb, stream);
                stream.synchronize();
                compare("allToAll (convenience)", expected("allToAll", check, n, shard), download(b, n), 0, n);
                check++;
                upload(a, data(rank, check, n));
                comm.reduceNormSquared(ta.slice(0, 1), stream);
                comm.reduceMax(ta.slice(1, 1), stream);
                comm.synchronize();
                stream.synchronize();
                float[] sum = reduce(check, n, Float::sum);
                float[] max = reduce(check, n, Math::max);
                float[] got = download(a, n);
                assertEquals(sum[0], got[0], "reduceNormSquared, rank " + rank + ", seed " + seed);
                assertEquals(max[1], got[1], "reduceMax, rank " + rank + ", seed " + seed);
            }
            hostSide();
        }

        /** One all-reduce and one host all-gather, element by element: what every stage must get right. */
        void allReduceAndHostGather() {
            int n = world * 1000;
            try (CudaStream stream = CudaStream.create(); DeviceMemory a = DeviceMemory.allocate(DType.FP32, n)) {
                upload(a, data(rank, 99, n));
                comm.allReduce(a.tensor(DType.FP32), ReduceOp.SUM, stream);
                stream.synchronize();
                compare("allReduce", reduce(99, n, Float::sum), download(a, n), 0, n);
            }
            long[] all = comm.allGatherLongsHost(seed + rank);
            for (int r = 0; r < world; r++) {
                assertEquals(seed + r, all[r], "allGatherLongsHost: rank " + r + " on rank " + rank);
            }
        }

        private void hostSide() {
            comm.barrier();
            List<byte[]> expected = new ArrayList<>();
            for (int r = 0; r < world; r++) {
                Random random = new Random(seed + 7 * r);
                byte[] bytes = new byte[r == world - 1 ? 0 : 1 + random.nextInt(200)];
                random.nextBytes(bytes);
                expected.add(bytes);
            }
            List<byte[]> all = comm.allGatherBytesHost(expected.get(rank));
            List<byte[]> onRoot = comm.gatherBytesHost(expected.get(rank), 0);
            assertEquals(rank == 0 ? world : 0, onRoot.size());
            for (int r = 0; r < world; r++) {
                assertArrayEquals(expected.get(r), all.get(r), "allGatherBytesHost: rank " + r + ", seed " + seed);
                if (rank == 0) {
                    assertArrayEquals(expected.get(r), onRoot.get(r), "gatherBytesHost: rank " + r + ", seed " + seed);
                }
            }
            Optional<Communicator> half = comm.split(rank < (world + 1) / 2 ? 0 : 1, rank);
            try (Communicator child = half.orElseThrow()) {
                long[] members = child.allGatherLongsHost(rank);
                int first = rank < (world + 1) / 2 ? 0 : (world + 1) / 2;
                for (int i = 0; i < members.length; i++) {
                    assertEquals(first + i, members[i], "split member " + i + " of rank " + rank);
                }
                child.barrier();
            }
        }

        private float[] expected(String command, int check, int n, int shard) {
            return switch (command) {
                case "allReduce", "reduceScatter" -> reduce(check, n, Float::sum);
                case "allGather" -> {
                    float[] full = new float[n];
                    for (int r = 0; r < world; r++) {
                        System.arraycopy(data(r, check, n), r * shard, full, r * shard, shard);
                    }
                    yield full;
                }
                case "broadcast" -> data(world - 1, check, n);
                case "ring" -> data((rank + world - 1) % world, check, n);
                case "destructiveAllToAll" -> { // the slot layout of AllToAllSchedule; the stale slot keeps own data
                    float[] after = new float[n];
                    for (int slot = 0; slot < world; slot++) {
                        int source = AllToAllSchedule.sourceOfSlot(rank, world, slot);
                        System.arraycopy(data(source < 0 ? rank : source, check, n), (source < 0 ? slot : rank) * shard,
                                after, slot * shard, shard);
                    }
                    yield after;
                }
                default -> { // allToAll: slot i comes from rank i's slot for this rank
                    float[] recv = new float[n];
                    for (int r = 0; r < world; r++) {
                        System.arraycopy(data(r, check, n), rank * shard, recv, r * shard, shard);
                    }
                    yield recv;
                }
            };
        }

        private float[] reduce(int check, int n, java.util.function.BinaryOperator<Float> op) {
            float[] result = data(0, check, n);
            for (int r = 1; r < world; r++) {
                float[] other = data(r, check, n);
                for (int i = 0; i < n; i++) {
                    result[i] = op.apply(result[i], other[i]);
                }
            }
            return result;
        }

        private void compare(String what, float[] expected, float[] actual, int from, int length) {
            for (int i = from; i < from + length; i++) {
                assertEquals(expected[i], actual[i], what + ": element " + i + " on rank " + rank + " of " + world
                        + ", seed " + seed);
            }
        }

        private void compareApprox(String what, float[] expected, float[] actual) {
            for (int i = 0; i < expected.length; i++) {
                assertEquals(expected[i], actual[i], 1e-5f * Math.max(1, Math.abs(expected[i])), what + ": element "
                        + i + " on rank " + rank + ", seed " + seed);
            }
        }

        private static void upload(DeviceMemory memory, float[] values) {
            memory.copyFromHost(MemorySegment.ofArray(values));
        }

        private static float[] download(DeviceMemory memory, int n) {
            float[] values = new float[n];
            MemorySegment target = MemorySegment.ofArray(values);
            memory.copyToHost(target);
            return target.toArray(ValueLayout.JAVA_FLOAT);
        }
    }
}
