package dev.jnccl.spark;

import dev.jnccl.CommunicatorOptions;
import java.io.Serial;
import java.io.Serializable;
import java.util.Objects;

/**
 * Options of Spark barrier mode: the CUDA device when Spark does not assign one, and how the
 * communicator's {@link CommunicatorOptions} are set. Immutable and serializable (Spark ships it to
 * the executors with the task); every {@code with...} returns a copy.
 */
public final class SparkOptions implements Serializable {
    @Serial
    private static final long serialVersionUID = 1L;

    private static final SparkOptions DEFAULTS = new SparkOptions(-1, defaults -> defaults);

    /**
     * How a task sets its communicator's options: applied on the executor to
     * {@link CommunicatorOptions#defaults()} ({@code CommunicatorOptions} itself is not serializable).
     */
    @FunctionalInterface
    public interface CommunicatorSetup extends Serializable {
        /**
         * The options to use.
         *
         * @param defaults {@link CommunicatorOptions#defaults()}
         * @return the communicator's options
         */
        CommunicatorOptions apply(CommunicatorOptions defaults);
    }

    /** The CUDA device of every task without a Spark-assigned GPU; -1 for none. */
    private final int device;
    /** Makes the communicator's options from the defaults, where the task runs. */
    private final CommunicatorSetup communicator;

    private SparkOptions(int device, CommunicatorSetup communicator) {
        this.device = device;
        this.communicator = communicator;
    }

    /**
     * No device override (Spark's "gpu" resource, else the system property {@code jnccl.device}, else
     * the task's index among the stage's tasks on its machine modulo the visible devices) and the default communicator options.
     *
     * @return the defaults
     */
    public static SparkOptions defaults() {
        return DEFAULTS;
    }

    /**
     * These options with every task on {@code device} unless Spark assigned it a GPU (a task's
     * "gpu" resource always wins: it is what the cluster reserved for it).
     *
     * @param device the CUDA device, 0 or more; -1 for none (the defaults)
     * @return a copy with the device replaced
     * @throws IllegalArgumentException when {@code device} is below -1
     */
    public SparkOptions withDevice(int device) {
        if (device < -1) {
            throw new IllegalArgumentException("withDevice: device " + device + " is out of range [-1, "
                    + Integer.MAX_VALUE + "] (-1: none)");
        }
        return new SparkOptions(device, communicator);
    }

    /**
     * These options with the communicator's options made by {@code setup}, e.g.
     * {@code withCommunicator(o -> o.withWatchdog(Duration.ofSeconds(30)))}.
     *
     * @param setup applied on the executor to {@link CommunicatorOptions#defaults()}
     * @return a copy with the setup replaced
     */
    public SparkOptions withCommunicator(CommunicatorSetup setup) {
        return new SparkOptions(device, Objects.requireNonNull(setup, "withCommunicator: setup is null"));
    }

    /** {@return the device override, -1 for none} */
    public int device() {
        return device;
    }

    /**
     * The communicator's options, made where the task runs.
     *
     * @return the options of {@link #withCommunicator} applied to the defaults
     * @throws NullPointerException when the setup returned null
     */
    public CommunicatorOptions communicator() {
        return Objects.requireNonNull(communicator.apply(CommunicatorOptions.defaults()),
                "SparkOptions: the communicator setup returned null");
    }

    @Override
    public String toString() {
        return "SparkOptions[device " + (device < 0 ? "auto" : device) + "]";
    }
}
