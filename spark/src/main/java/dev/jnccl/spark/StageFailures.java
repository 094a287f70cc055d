package dev.jnccl.spark;

import dev.jnccl.CommunicatorAbortedException;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.spark.ExceptionFailure;
import org.apache.spark.SparkContext;
import org.apache.spark.TaskEndReason;
import org.apache.spark.scheduler.SparkListener;
import org.apache.spark.scheduler.SparkListenerStageSubmitted;
import org.apache.spark.scheduler.SparkListenerTaskEnd;
import org.apache.spark.storage.RDDInfo;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Which rank's own exception failed a barrier stage, as the driver learns it from Spark's listener
 * bus. When a rank fails, jnccl aborts its communicator before Spark has recorded that task's
 * failure, so its peers fail within milliseconds with {@link CommunicatorAbortedException}s, and
 * Spark's {@code SparkException} names whichever failure reached the driver first: often a
 * bystander. This listener keeps, per stage attempt of the stages that compute one RDD, the first
 * task failure that is not such an abort: the root cause.
 */
final class StageFailures extends SparkListener {
    /** How long the driver waits for the failed attempt's last task ends after Spark failed the job. */
    static final long SETTLE_MILLIS = 5_000;

    private final int rddId;
    private final int tasks;
    private final Set<Integer> stages = new HashSet<>();
    /** Stage attempt ("stage.attempt") to the ranks whose tasks ended there. */
    private final Map<String, Set<Integer>> ended = new HashMap<>();
    /** Stage attempt to its culprit, "rank r failed: class: message". */
    private final Map<String, String> culprits = new HashMap<>();
    /** The stage attempt of the latest task failure. */
    private String lastFailed;

    /**
     * @param rddId the barrier RDD whose stages are watched
     * @param tasks the number of tasks (ranks) of each attempt
     */
    StageFailures(int rddId, int tasks) {
        this.rddId = rddId;
        this.tasks = tasks;
    }

    /** Registers a listener for {@code rddId}'s stages on {@code spark}; remove it with {@link #remove}. */
    static StageFailures register(SparkContext spark, int rddId, int tasks) {
        StageFailures failures = new StageFailures(rddId, tasks);
        spark.addSparkListener(failures);
        return failures;
    }

    void remove(SparkContext spark) {
        spark.removeSparkListener(this);
    }

    @Override
    public void onStageSubmitted(SparkListenerStageSubmitted submitted) {
        List<Integer> rdds = CollectionConverters.asJava(submitted.stageInfo().rddInfos()).stream().map(RDDInfo::id)
                .toList();
        stageSubmitted(submitted.stageInfo().stageId(), rdds);
    }

    @Override
    public void onTaskEnd(SparkListenerTaskEnd end) {
        taskEnded(end.stageId(), end.stageAttemptId(), end.taskInfo().partitionId(), end.taskInfo().successful(),
                end.reason());
    }

    /** A stage was submitted that computes the RDDs {@code rddIds}: watched when one is ours. */
    synchronized void stageSubmitted(int stageId, List<Integer> rddIds) {
        if (rddIds.contains(rddId)) {
            stages.add(stageId);
        }
    }

    /** The task of partition {@code rank} of a stage attempt ended, successfully or for {@code reason}. */
    synchronized void taskEnded(int stageId, int stageAttempt, int rank, boolean successful, TaskEndReason reason) {
        if (!stages.contains(stageId)) {
            return;
        }
        String attempt = stageId + "." + stageAttempt;
        ended.computeIfAbsent(attempt, k -> new HashSet<>()).add(rank);
        if (successful) {
            return;
        }
        lastFailed = attempt;
        if (reason instanceof ExceptionFailure failure && isOwn(failure) && !culprits.containsKey(attempt)) {
            culprits.put(attempt, "rank " + rank + " failed: " + failure.className()
                    + (failure.description() == null ? "" : ": " + failure.description()));
        }
        notifyAll();
    }

    /** Whether the task failed with its own exception, not with an abort a peer's failure caused. */
    static boolean isOwn(ExceptionFailure failure) {
        String aborted = CommunicatorAbortedException.class.getName();
        return !aborted.equals(failure.className())
                && (failure.fullStackTrace() == null || !failure.fullStackTrace().contains(aborted));
    }

    /**
     * The culprit of the latest failed stage attempt, "rank r failed: its exception", waiting up to
     * {@code millis} for that attempt's tasks to end; null when no rank failed with its own exception.
     */
    synchronized String culprit(long millis) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(millis);
        while (lastFailed == null || !culprits.containsKey(lastFailed) && ended.get(lastFailed).size() < tasks) {
            long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
            if (left <= 0) {
                break;
            }
            wait(left);
        }
        return lastFailed == null ? null : culprits.get(lastFailed);
    }
}
