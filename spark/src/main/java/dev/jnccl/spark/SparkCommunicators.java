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
 * its executor modulo the visible devices. Two tasks of one executor on one device are refused
 * before NCCL starts unless the loaded NCCL allows several ranks of a process on a GPU (the host
 * emulation; NCCL 2.30+ with {@code NCCL_MULTI_RANK_GPU_ENABLE=1}).
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
     * @throws IllegalStateException    when tasks of one executor would share a device the loaded NCCL cannot share
     * @throws dev.jnccl.CommunicatorAbortedException when the other tasks did not join in time or the task was killed
     */
    public static Communicator create(BarrierTaskContext context, SparkOptions options) {
        Objects.requireNonNull(context, "create: context is null");
        Objects.requireNonNull(options, "create: options are null");
        CommunicatorOptions communicatorOptions = options.communicator();
        int rank = context.partitionId();
        BarrierTaskInfo[] tasks = context.getTaskInfos();
        int world = tasks.length;
        int device = device(context, options, localIndex(tasks, rank));
        String executor = SparkEnv.get() == null ? "?" : SparkEnv.get().executorId();
        // The one Spark rendezvous: rank 0's unique id, and where every task runs.
        String id = rank == 0 ? Base64.getEncoder().encodeToString(UniqueId.generate().bytes()) : "";
        List<Placement> placements = new ArrayList<>(world);
        for (String message : context.allGather(new Placement(device, id, executor).encode())) {
            placements.add(Placement.decode(message));
        }
        String shared = sharedDevices(placements);
        if (!shared.isEmpty() && !devicesShareable()) {
            throw new IllegalStateException("create: " + shared + " and NCCL " + JncclRuntime.query().nccl()
                    + " refuses several ranks of one process on one GPU. Give each task its own GPU (on a cluster:"
                    + " spark.task.resource.gpu.amount=1 with a GPU discovery script; locally: no more tasks per"
                    + " executor than GPUs), or load NCCL 2.30+ with NCCL_MULTI_RANK_GPU_ENABLE=1");
        }
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
     * {@code spark.task.maxFailures}); the last failure is thrown as Spark's {@code SparkException}.
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
        Object[] results = (Object[]) ranks.coalesce(1, true, Option.empty(), null).collect();
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
    static int device(BarrierTaskContext context, SparkOptions options, int localIndex) {
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
        return logged(context, localIndex % visible, "task " + localIndex + " of its executor modulo " + visible
                + " visible device(s)");
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

    /** The index of task {@code rank} among the stage's tasks of its executor (same address), in partition order. */
    static int localIndex(BarrierTaskInfo[] tasks, int rank) {
        int index = 0;
        for (int r = 0; r < rank; r++) {
            if (tasks[r].address().equals(tasks[rank].address())) {
                index++;
            }
        }
        return index;
    }

    /** Whether the loaded NCCL lets ranks of one process share a GPU. */
    private static boolean devicesShareable() {
        JncclRuntime runtime = JncclRuntime.query();
        // The host emulation follows the variable as NCCL 2.30+ does.
        return "1".equals(System.getenv("NCCL_MULTI_RANK_GPU_ENABLE"))
                && (runtime.backend() == Backend.HOST || runtime.nccl().atLeast(2, 30));
    }

    /**
     * Every device that several tasks of one executor share, as {@code ranks [0, 1] of executor 3
     * share device 0}, joined with {@code " and "}; empty when none is shared.
     */
    static String sharedDevices(List<Placement> placements) {
        Map<String, List<Integer>> ranks = new TreeMap<>();
        for (int rank = 0; rank < placements.size(); rank++) {
            Placement p = placements.get(rank);
            ranks.computeIfAbsent("executor " + p.executor() + " share device " + p.device(), k -> new ArrayList<>())
                    .add(rank);
        }
        List<String> shared = new ArrayList<>();
        ranks.forEach((where, members) -> {
            if (members.size() > 1) {
                shared.add("ranks " + members + " of " + where);
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
