package dev.jnccl.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.CommunicatorAbortedException;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.spark.ExceptionFailure;
import org.apache.spark.TaskKilled;
import org.junit.jupiter.api.Test;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;

/**
 * {@link StageFailures} fed the listener bus's events in the orders a cluster produces them: the
 * peers' aborts before the failing rank's own exception, other stages' failures, attempts retried.
 */
class StageFailuresTest {
    private static final Seq<org.apache.spark.scheduler.AccumulableInfo> NONE =
            CollectionConverters.asScala(List.<org.apache.spark.scheduler.AccumulableInfo>of()).toSeq();

    private static ExceptionFailure failure(Throwable t) {
        return new ExceptionFailure(t, NONE);
    }

    private static ExceptionFailure peerAbort(int culprit) {
        return failure(new CommunicatorAbortedException("barrier: ... rank " + culprit + " aborted"));
    }

    private static TaskKilled killed() {
        return TaskKilled.apply("cancelled", TaskKilled.apply$default$2(), TaskKilled.apply$default$3(),
                TaskKilled.apply$default$4());
    }

    @Test
    void theRankWithItsOwnExceptionIsNamedThoughItsPeersAbortsCameFirst() throws Exception {
        StageFailures failures = new StageFailures(7, 3);
        failures.stageSubmitted(4, List.of(6, 7));
        failures.stageSubmitted(5, List.of(8)); // another stage (the results' side of the shuffle)
        failures.taskEnded(4, 0, 0, false, peerAbort(2));
        failures.taskEnded(5, 0, 0, false, failure(new IllegalArgumentException("not ours")));
        // A peer that wrapped its abort is still a bystander.
        failures.taskEnded(4, 0, 1, false, failure(new RuntimeException("wrapped", peerAbort(2).exception().get())));
        CompletableFuture<String> culprit = CompletableFuture.supplyAsync(() -> {
            try {
                return failures.culprit(30_000);
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        Thread.sleep(100);
        assertFalse(culprit.isDone(), "answered before the attempt's tasks ended: " + culprit.getNow(null));
        failures.taskEnded(4, 0, 2, false, failure(new IllegalStateException("rank 2's own failure")));
        assertEquals("rank 2 failed: java.lang.IllegalStateException: rank 2's own failure",
                culprit.get(10, TimeUnit.SECONDS));
    }

    @Test
    void theLatestFailedAttemptCountsAndNoCulpritEndsTheWaitOnceItsTasksEnded() throws Exception {
        StageFailures failures = new StageFailures(3, 2);
        failures.stageSubmitted(1, List.of(3));
        failures.taskEnded(1, 0, 1, false, failure(new IllegalStateException("attempt 0's")));
        failures.taskEnded(1, 0, 0, false, peerAbort(1));
        failures.taskEnded(1, 1, 0, false, killed());
        failures.taskEnded(1, 1, 1, false, killed());
        long t0 = System.nanoTime();
        assertNull(failures.culprit(30_000), "attempt 1 was cancelled: no rank failed on its own there");
        assertTrue(TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - t0) < 10, "waited although every task ended");
    }

    @Test
    void nothingFailedAnswersNullAtTheDeadline() throws Exception {
        StageFailures failures = new StageFailures(3, 2);
        failures.stageSubmitted(1, List.of(3));
        failures.taskEnded(1, 0, 0, true, org.apache.spark.Success$.MODULE$);
        assertNull(failures.culprit(50));
    }
}
