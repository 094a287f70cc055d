package dev.jnccl.spark;

import dev.jnccl.Backend;
import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.JncclRuntime;
import dev.jnccl.NcclException;
import dev.jnccl.UniqueId;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.internal.VisibleDevices;
import dev.jnccl.spi.Modes;
import dev.jnccl.spi.NcclHostSide;
import java.io.Serial;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.stream.IntStream;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.BarrierTaskInfo;
import org.apache.spark.SparkContext;
import org.apache.spark.SparkEnv;
import org.apache.spark.SparkException;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.rdd.RDD;
import org.apache.spark.resource.ResourceInformation;
import org.apache.spark.util.TaskCompletionListener;
import org.apache.spark.util.TaskFailureListener;
import org.apache.spark.util.TaskInterruptListener;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import scala.Option;
import scala.jdk.javaapi.CollectionConverters;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;
import scala.runtime.AbstractFunction1;

/**
 * Spark barrier mode: one rank per task of a barrier stage (rank = the task's partition id, world
 * size = the stage's number of tasks), each on one GPU. Either inside your own barrier stage,
 * {@code rdd.barrier().mapPartitions(...)} calling {@link #create(BarrierTaskContext)}, or from the
 * driver with {@link #run(JavaSparkContext, int, SparkOptions, RankFunction)}, which runs a Java
 * function on n barrier tasks and returns their results in rank order.
 *
 * <p><b>Rendezvous.</b> Rank 0 makes the NCCL unique id and one Spark {@code allGather} carries it
 * (Base64) with every task's executor and device. That is the only Spark call: each costs a second
 * or more (Spark polls once a second), so the communicator's barrier and host gathers run over NCCL
 * itself ({@link NcclHostSide}).
 *
 * <p><b>Device.</b> The task's GPU from Spark's "gpu" resource when Spark assigned one
 * ({@code spark.task.resource.gpu.amount} with a discovery script); else {@link SparkOptions#withDevice},
 * else the system property {@code jnccl.device}, else the task's index among the stage's tasks on
 * its machine (of every executor there) modulo the visible devices. Two tasks of one machine on one
 * device, of one executor or of two, are refused before NCCL starts, naming the ranks, their
 * executors and the device, unless the loaded NCCL allows several ranks on a GPU (NCCL 2.30+ or the
 * host emulation, with {@code NCCL_MULTI_RANK_GPU_ENABLE=1}).
 *
 * <p><b>Failure.</b> When a task fails, Spark kills the other tasks of the stage and retries the
 * whole stage. Each communicator made here aborts as soon as its task is killed or fails (task
 * interrupt and failure listeners), so no peer waits out a deadline, and is closed when its task
 * completes: nothing of one attempt is left for the next, which builds fresh communicators.
 */
public final class SparkCommunicators {
    private static final Logger LOG = LoggerFactory.getLogger(SparkCommunicators.class);
    /** The system property that puts every task without a Spark-assigned GPU on one device. */
    static final String DEVICE_PROPERTY = "jnccl.device";

    private SparkCommunicators() {}

    /**
     * This task's communicator with {@link SparkOptions#defaults()}. See {@link #create(BarrierTaskContext, SparkOptions)}.
     *
     * @param context the barrier task's context ({@code BarrierTaskContext.get()})
     * @return this rank's communicator, closed by the caller (and at the latest when the task completes)
     */
    public static Communicator create(BarrierTaskContext context) {
        return create(context, SparkOptions.defaults());
    }

    /**
     * This task's communicator: every task of the barrier stage must call it. Rank = the task's
     * partition id, world size = the number of tasks of the stage. Waits (one Spark
     * {@code allGather}, then NCCL's init, up to {@link CommunicatorOptions#initTimeout()}) for all
     * tasks. The communicator aborts when Spark kills or fails the task and closes when the task
     * completes.
     *
     * @param context the barrier task's context ({@code BarrierTaskContext.get()})
     * @param options the device override and the communicator's options
     * @return this rank's communicator, closed by the caller (and at the latest when the task completes)
     * @throws IllegalArgumentException when the device (from Spark, the options or {@code jnccl.device}) is not valid
     * @throws IllegalStateException    when tasks of one machine would share a device the loaded NCCL cannot share
     * @throws dev.jnccl.CommunicatorAbortedException when the other tasks did not join in time or the task was killed
     */
    public static Communicator create(BarrierTaskContext context, SparkOptions options) {
        Objects.requireNonNull(context, "create: context is null");
        Objects.requireNonNull(options, "create: options are null");
        CommunicatorOptions communicatorOptions = options.communicator();
        int rank = context.partitionId();
        BarrierTaskInfo[] tasks = context.getTaskInfos();
        int world = tasks.length;
        int device = device(context, options, hostIndex(tasks, rank));
        List<Placement> placements = placements(context, device, rank);
        String shared = checkDevices(placements, tasks);
        UniqueId uniqueId = UniqueId.fromBytes(Base64.getDecoder().decode(placements.get(0).id()));
        String attempt = "stage " + context.stageId() + " attempt " + context.stageAttemptNumber() + ", partition "
                + rank;
        Communicator communicator;
        try {
            communicator = Modes.communicator(uniqueId, rank, world, device, communicatorOptions,
                    NcclHostSide.parts(() -> killed(context)));
        } catch (NcclException e) {
            if (shared.isEmpty() || !e.getMessage().contains("Duplicate GPU")) {
                throw e;
            }
            throw new IllegalStateException("create: " + shared + " and NCCL refused it (" + attempt + ")", e);
        }
        watch(context, communicator, attempt);
        return communicator;
    }

    /** The one Spark rendezvous: rank 0's unique id, and every task's device and executor, in rank order. */
    private static List<Placement> placements(BarrierTaskContext context, int device, int rank) {
        String executor = SparkEnv.get() == null ? "?" : SparkEnv.get().executorId();
        String id = rank == 0 ? Base64.getEncoder().encodeToString(UniqueId.generate().bytes()) : "";
        List<Placement> placements = new ArrayList<>();
        for (String message : context.allGather(new Placement(device, id, executor).encode())) {
            placements.add(Placement.decode(message));
        }
        return placements;
    }

    /**
     * Refuses ranks of one machine on one device unless the loaded NCCL allows it (NCCL itself would
     * refuse them later, with less to go on); returns the shared devices (empty: none).
     */
    private static String checkDevices(List<Placement> placements, BarrierTaskInfo[] tasks) {
        String shared = sharedDevices(placements, hosts(tasks));
        if (!shared.isEmpty() && !devicesShareable()) {
            throw new IllegalStateException("create: " + shared + " and NCCL " + JncclRuntime.query().nccl()
                    + " refuses several ranks of one machine on one GPU. Give each task its own GPU (on a cluster:"
                    + " spark.executor.resource.gpu.amount and spark.task.resource.gpu.amount=1, not a fraction,"
                    + " with a GPU discovery script; locally: no more tasks than GPUs), or load NCCL 2.30+ with"
                    + " NCCL_MULTI_RANK_GPU_ENABLE=1");
        }
        return shared;
    }

    /** Aborts the communicator when Spark kills or fails its task, and closes it when the task completes. */
    private static void watch(BarrierTaskContext context, Communicator communicator, String attempt) {
        context.addTaskInterruptListener((TaskInterruptListener) (task, reason) ->
                communicator.abort("Spark killed the task (" + attempt + "): " + reason));
        context.addTaskFailureListener((TaskFailureListener) (task, error) ->
                communicator.abort("the task failed (" + attempt + "): " + error));
        context.addTaskCompletionListener((TaskCompletionListener) task -> communicator.close());
        String reason = killed(context);
        if (reason != null) { // killed before the listener was there
            communicator.abort(reason);
        }
    }

    /** Why waiting for the other tasks is pointless: this task was killed; else null. */
    private static String killed(BarrierTaskContext context) {
        if (!context.isInterrupted()) {
            return null;
        }
        Option<String> reason = context.getKillReason();
        return "Spark killed the task: " + (reason.isDefined() ? reason.get() : "no reason given");
    }

    /**
     * Runs {@code work} on {@code tasks} barrier tasks, each with its rank's communicator (closed
     * afterwards), and returns their results in rank order. The driver's thread waits for the job;
     * a task that throws fails the stage, which Spark retries as a whole (up to
     * {@code spark.stage.maxConsecutiveAttempts} attempts; {@code spark.task.maxFailures} does not
     * apply to barrier stages); the last failure is thrown as Spark's {@code SparkException}, whose
     * message starts with {@code rank r failed: } and that rank's own exception when a rank failed
     * with one (not the abort it caused on its peers, which Spark may have reported first).
     * Cancel it with {@code setJobGroup(group, description, true)} and {@code cancelJobGroup(group)}.
     *
     * @param spark   the Spark context (its cluster needs {@code tasks} free task slots at once)
     * @param tasks   the number of tasks (ranks), 1 or more
     * @param options the device override and the communicator's options
     * @param work    what each rank does (serializable; so must its result be)
     * @param <R>     the result of one rank
     * @return every rank's result, index = rank (an unmodifiable list)
     * @throws IllegalArgumentException when {@code tasks} is below 1
     */
    public static <R> List<R> run(JavaSparkContext spark, int tasks, SparkOptions options, RankFunction<R> work) {
        Objects.requireNonNull(spark, "run: spark is null");
        Objects.requireNonNull(options, "run: options are null");
        Objects.requireNonNull(work, "run: work is null");
        if (tasks < 1) {
            throw new IllegalArgumentException("run: tasks " + tasks + " is out of range [1, " + Integer.MAX_VALUE + "]");
        }
        @SuppressWarnings("unchecked")
        ClassTag<Object> anyRef = (ClassTag<Object>) (ClassTag<?>) ClassTag$.MODULE$.apply(Object.class);
        RDD<Object> ranks = spark.parallelize(IntStream.range(0, tasks).boxed().toList(), tasks).rdd().barrier()
                .mapPartitions(new BarrierTask<>(options, work), false, anyRef);
        // Through a shuffle: Spark retries a failed barrier stage only when it is a shuffle map stage
        // (a barrier result stage fails the job at once).
        Object[] results = collect(spark.sc(), ranks, tasks);
        Object[] ordered = new Object[tasks];
        for (Object result : results) {
            Object[] rankAndResult = (Object[]) result;
            ordered[(Integer) rankAndResult[0]] = rankAndResult[1];
        }
        @SuppressWarnings("unchecked")
        List<R> list = (List<R>) Arrays.asList(ordered);
        return Collections.unmodifiableList(list);
    }

    /**
     * The ranks' results; when the job fails, Spark's {@code SparkException} led by the rank that
     * failed with its own exception, whichever task's failure Spark reported.
     */
    private static Object[] collect(SparkContext spark, RDD<Object> ranks, int tasks) {
        StageFailures failures = StageFailures.register(spark, ranks.id(), tasks);
        try {
            return (Object[]) ranks.coalesce(1, true, Option.empty(), null).collect();
        } catch (Exception e) { // Spark's SparkException is checked in Java but not declared by Scala
            throw sneaky(rootCauseFirst(e, failures));
        } finally {
            failures.remove(spark);
        }
    }

    /** {@code e}, or a {@code SparkException} whose message names the culprit rank first when one is known. */
    private static Exception rootCauseFirst(Exception e, StageFailures failures) {
        String culprit;
        try {
            culprit = failures.culprit(StageFailures.SETTLE_MILLIS);
        } catch (InterruptedException interrupted) {
            Thread.currentThread().interrupt();
            e.addSuppressed(interrupted);
            return e;
        }
        if (culprit == null || !(e instanceof SparkException) || String.valueOf(e.getMessage()).startsWith(culprit)) {
            return e;
        }
        return new SparkException(culprit + "\n(Spark reported: " + e.getMessage() + ")", e);
    }

    /**
     * {@link #run(JavaSparkContext, int, SparkOptions, RankFunction)} from a Scala {@code SparkContext}.
     *
     * @param spark   the Spark context
     * @param tasks   the number of tasks (ranks), 1 or more
     * @param options the device override and the communicator's options
     * @param work    what each rank does
     * @param <R>     the result of one rank
     * @return every rank's result, index = rank
     */
    public static <R> List<R> run(SparkContext spark, int tasks, SparkOptions options, RankFunction<R> work) {
        Objects.requireNonNull(spark, "run: spark is null");
        return run(JavaSparkContext.fromSparkContext(spark), tasks, options, work);
    }

    /**
     * One barrier task of {@link #run}: its communicator, the work, and the result as the partition's one element.
     *
     * @param <R> the result of one rank
     */
    private static final class BarrierTask<R> extends AbstractFunction1<scala.collection.Iterator<Integer>,
            scala.collection.Iterator<Object>> implements Serializable {
        @Serial
        private static final long serialVersionUID = 1L;
        /** The device override and the communicator's options, shipped with the task. */
        private final SparkOptions options;
        /** What the rank does. */
        private final RankFunction<R> work;

        BarrierTask(SparkOptions options, RankFunction<R> work) {
            this.options = options;
            this.work = work;
        }

        @Override
        public scala.collection.Iterator<Object> apply(scala.collection.Iterator<Integer> partition) {
            Communicator communicator = create(BarrierTaskContext.get(), options);
            Object result;
            try {
                result = work.apply(communicator);
            } catch (Throwable t) {
                // Abort before close: a close would finalize, which waits for peers this rank leaves.
                communicator.abort("rank " + communicator.rank() + "'s work failed: " + t);
                throw sneaky(t);
            } finally {
                communicator.close();
            }
            Object rankAndResult = new Object[] {communicator.rank(), result};
            return CollectionConverters.asScala(Collections.singletonList(rankAndResult).iterator());
        }
    }

    @SuppressWarnings("unchecked")
    private static <T extends Throwable> RuntimeException sneaky(Throwable t) throws T {
        throw (T) t; // the task fails with the work's own exception, checked or not
    }

    /** The device of this task; logged with where it came from. */
    static int device(BarrierTaskContext context, SparkOptions options, int hostIndex) {
        ResourceInformation gpu = context.resourcesJMap().get("gpu");
        if (gpu != null && gpu.addresses().length > 0) {
            return logged(context, parseDevice(gpu.addresses()[0], "Spark's gpu resource "
                    + Arrays.toString(gpu.addresses())), "Spark's gpu resource " + Arrays.toString(gpu.addresses()));
        }
        if (options.device() >= 0) {
            return logged(context, options.device(), "SparkOptions.withDevice");
        }
        String property = System.getProperty(DEVICE_PROPERTY);
        if (property != null) {
            return logged(context, parseDevice(property.strip(), "the system property " + DEVICE_PROPERTY),
                    "the system property " + DEVICE_PROPERTY);
        }
        int visible = Cuda.deviceCount();
        if (visible < 1) {
            throw new IllegalStateException("create: no CUDA device is visible to the executor ("
                    + VisibleDevices.setting() + ")");
        }
        return logged(context, hostIndex % visible, "task " + hostIndex + " of the stage on its machine modulo "
                + visible + " visible device(s)");
    }

    private static int logged(BarrierTaskContext context, int device, String source) {
        LOG.info("Spark task of partition {} (stage {} attempt {}) on CUDA device {} from {}", context.partitionId(),
                context.stageId(), context.stageAttemptNumber(), device, source);
        return device;
    }

    static int parseDevice(String text, String source) {
        try {
            int device = Integer.parseInt(text);
            if (device >= 0) {
                return device;
            }
        } catch (NumberFormatException e) {
            // said below
        }
        throw new IllegalArgumentException("create: device \"" + text + "\" from " + source
                + " is not a CUDA device index in [0, " + Integer.MAX_VALUE + "]");
    }

    /**
     * The index of task {@code rank} among the stage's tasks on its machine (all its executors there),
     * in partition order: tasks of two executors of one machine then take different devices.
     */
    static int hostIndex(BarrierTaskInfo[] tasks, int rank) {
        List<String> hosts = hosts(tasks);
        int index = 0;
        for (int r = 0; r < rank; r++) {
            if (hosts.get(r).equals(hosts.get(rank))) {
                index++;
            }
        }
        return index;
    }

    /** Each task's machine: the host of its executor's address ({@code host:port}). */
    static List<String> hosts(BarrierTaskInfo[] tasks) {
        List<String> hosts = new ArrayList<>(tasks.length);
        for (BarrierTaskInfo task : tasks) {
            String address = task.address();
            int colon = address.lastIndexOf(':');
            hosts.add(colon < 0 ? address : address.substring(0, colon));
        }
        return hosts;
    }

    /** Whether the loaded NCCL lets ranks of one machine share a GPU. */
    private static boolean devicesShareable() {
        JncclRuntime runtime = JncclRuntime.query();
        // The host emulation follows the variable as NCCL 2.30+ does.
        return "1".equals(System.getenv("NCCL_MULTI_RANK_GPU_ENABLE"))
                && (runtime.backend() == Backend.HOST || runtime.nccl().atLeast(2, 30));
    }

    /**
     * Every device that several tasks of one machine share, as {@code ranks [0, 1] (executors [1, 2])
     * on host h share device 0}, joined with {@code " and "}; empty when none is shared. NCCL refuses
     * it whether the tasks are threads of one executor or run in different executors.
     */
    static String sharedDevices(List<Placement> placements, List<String> hosts) {
        Map<String, List<Integer>> ranks = new TreeMap<>();
        for (int rank = 0; rank < placements.size(); rank++) {
            ranks.computeIfAbsent("on host " + hosts.get(rank) + " share device " + placements.get(rank).device(),
                    k -> new ArrayList<>()).add(rank);
        }
        List<String> shared = new ArrayList<>();
        ranks.forEach((where, members) -> {
            if (members.size() > 1) {
                List<String> executors = members.stream().map(r -> placements.get(r).executor()).toList();
                shared.add("ranks " + members + " (executors " + executors + ") " + where);
            }
        });
        return String.join(" and ", shared);
    }

    /**
     * What one task tells the others: its device, rank 0's unique id (Base64; empty elsewhere) and its executor.
     *
     * @param device   the task's CUDA device
     * @param id       the unique id in Base64 (rank 0), else empty
     * @param executor the executor's id
     */
    record Placement(int device, String id, String executor) {
        String encode() {
            return device + "," + id + "," + executor; // the executor last: its id may hold commas
        }

        static Placement decode(String message) {
            String[] parts = message.split(",", 3);
            return new Placement(Integer.parseInt(parts[0]), parts[1], parts[2]);
        }
    }
}
