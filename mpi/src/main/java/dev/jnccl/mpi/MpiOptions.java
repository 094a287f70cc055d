package dev.jnccl.mpi;

import dev.jnccl.CommunicatorOptions;
import dev.jnccl.internal.OptionChecks;
import java.util.OptionalInt;

/**
 * Options of MPI mode. Every value is checked when it is set (by a {@code with*} method or the
 * constructor), with a message naming the option and the value.
 *
 * @param communicator options of this process's communicator (deadlines, watchdog, mode)
 * @param device       the CUDA device of this process, 0 or more (below the number of visible devices,
 *                     checked at launch); empty (the default) means: the system property
 *                     {@code jnccl.device}, else the environment variable {@code JNCCL_DEVICE}, else the
 *                     node-local rank (see {@link MpiCommunicators})
 */
public record MpiOptions(CommunicatorOptions communicator, OptionalInt device) {
    private static final String NAME = "MpiOptions";

    /**
     * Checks the values: communicator options and device given, a device not negative.
     *
     * @throws NullPointerException     naming the option that is null
     * @throws IllegalArgumentException naming a negative device
     */
    public MpiOptions {
        OptionChecks.given(NAME, communicator, "communicator options are null");
        OptionChecks.given(NAME, device, "device is null (use OptionalInt.empty())");
        if (device.isPresent() && device.getAsInt() < 0) {
            throw OptionChecks.negative(NAME, "device " + device.getAsInt());
        }
    }

    /**
     * The defaults.
     *
     * @return default communicator options, the device from the node-local rank (or jnccl.device / JNCCL_DEVICE)
     */
    public static MpiOptions defaults() {
        return new MpiOptions(CommunicatorOptions.defaults(), OptionalInt.empty());
    }

    /**
     * These options with other communicator options.
     *
     * @param options options of this process's communicator
     * @return a copy with {@code communicator} replaced
     * @throws NullPointerException when {@code options} is null
     */
    public MpiOptions withCommunicator(CommunicatorOptions options) {
        return new MpiOptions(options, device);
    }

    /**
     * These options with this process on {@code device}, whatever its node-local rank (e.g. several
     * processes on one GPU, or a launcher that already narrowed {@code CUDA_VISIBLE_DEVICES}).
     *
     * @param device the CUDA device, at least 0
     * @return a copy with {@code device} replaced
     * @throws IllegalArgumentException when {@code device} is negative
     */
    public MpiOptions withDevice(int device) {
        return new MpiOptions(communicator, OptionalInt.of(device));
    }
}
