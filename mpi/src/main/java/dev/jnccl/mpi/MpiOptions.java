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
 * @param minWorld     0 (the default): a process that dies ends the job. 1 or more: the survivors go
 *                     on without it while at least {@code minWorld} processes remain (see
 *                     {@link #withContinueWithoutFailedRanks(int)})
 */
public record MpiOptions(CommunicatorOptions communicator, OptionalInt device, int minWorld) {
    private static final String NAME = "MpiOptions";

    /**
     * Checks the values: communicator options and device given, a device and minWorld not negative.
     *
     * @throws NullPointerException     naming the option that is null
     * @throws IllegalArgumentException naming a negative device or minWorld
     */
    public MpiOptions {
        OptionChecks.given(NAME, communicator, "communicator options are null");
        OptionChecks.given(NAME, device, "device is null (use OptionalInt.empty())");
        if (device.isPresent() && device.getAsInt() < 0) {
            throw OptionChecks.negative(NAME, "device " + device.getAsInt());
        }
        OptionChecks.range(NAME, "minWorld", minWorld, 0, Integer.MAX_VALUE);
    }

    /**
     * Options that end the job when a process dies (minWorld 0): the constructor of the options
     * before {@code minWorld} existed.
     *
     * @param communicator options of this process's communicator
     * @param device       the CUDA device of this process, or empty
     */
    public MpiOptions(CommunicatorOptions communicator, OptionalInt device) {
        this(communicator, device, 0);
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
        return new MpiOptions(options, device, minWorld);
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
        return new MpiOptions(communicator, OptionalInt.of(device), minWorld);
    }

    /**
     * These options with the survivors going on without a process that dies, while at least
     * {@code minWorld} processes remain; 0 turns it off (the default: the job ends with
     * {@code MPI_Abort}, as for any failure).
     *
     * <p>It needs a launcher that keeps the job running when a process dies: Open MPI's
     * {@code mpirun --enable-recovery} (without it mpirun ends the job at the death; MPICH's hydra
     * ends or breaks the job whatever its flags, see docs/elastic.md). MPI reports nothing about a
     * dead process (a message to it simply never completes), so jnccl finds it: when this process's
     * communicator is aborted (NCCL's error about the dead peer, the watchdog, a host-side deadline),
     * every peer is asked for its summary over MPI; the ones that do not answer within 3 s are lost.
     * Then, instead of ending the job, every call on the
     * communicator throws {@link dev.jnccl.RankLostException}, whose {@code recover()} gives the
     * survivors' communicator (ranks renumbered in the order of their old ranks); the survivors' MPI
     * side is an MPI communicator of their own ({@code MPI_Comm_create_group}, which only they call).
     * An abort with no rank lost, or one that leaves fewer than {@code minWorld} processes, ends the
     * job as before. Close both the old and the survivors' communicator: MPI is finalized (when jnccl
     * initialised it) once the last of them is closed.
     *
     * @param minWorld the fewest processes the job goes on with (1 or more), or 0 for off
     * @return a copy with {@code minWorld} replaced
     * @throws IllegalArgumentException when {@code minWorld} is negative
     */
    public MpiOptions withContinueWithoutFailedRanks(int minWorld) {
        return new MpiOptions(communicator, device, minWorld);
    }
}
