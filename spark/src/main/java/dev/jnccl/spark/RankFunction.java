package dev.jnccl.spark;

import dev.jnccl.Communicator;
import java.io.Serializable;

/**
 * What each barrier task of {@link SparkCommunicators#run} does with its rank's communicator. Spark
 * ships it to the executors, so it must be serializable (a lambda assigned to this type is), and so
 * must its result, which Spark sends back to the driver.
 *
 * @param <R> the result of one rank
 */
@FunctionalInterface
public interface RankFunction<R> extends Serializable {
    /**
     * Runs one rank's work.
     *
     * @param communicator this rank's communicator (rank = the task's partition id); closed afterwards
     * @return this rank's result
     * @throws Exception anything: the task fails, Spark kills the other tasks of the stage and retries it
     */
    R apply(Communicator communicator) throws Exception;
}
