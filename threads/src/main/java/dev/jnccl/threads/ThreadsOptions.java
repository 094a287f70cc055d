package dev.jnccl.threads;

import dev.jnccl.CommunicatorOptions;
import java.util.List;
import java.util.Objects;

/**
 * Options of threads mode.
 *
 * @param communicator    options of each rank's communicator (deadlines, watchdog)
 * @param memcpyAllGather run the all-gathers of transactions as device-to-device copies
 *                        (cudaMemcpyAsync on the comms stream: copy engines, no SMs) instead of NCCL
 * @param memcpySendRecv  run the sends and receives of transactions as device-to-device copies;
 *                        the destructive all-to-all always uses NCCL
 * @param maxLead         how many transactions one rank's thread may run ahead of the slowest rank
 *                        before it waits (see {@link ThreadsCommunicators})
 * @param pinCpus         pin each rank's thread to the CPUs local to its GPU when NVML is available
 * @param devices         the device of each rank (index = rank), several ranks may share one; empty
 *                        (the default) means one rank per device, rank r on device r
 */
public record ThreadsOptions(CommunicatorOptions communicator, boolean memcpyAllGather, boolean memcpySendRecv,
                             int maxLead, boolean pinCpus, List<Integer> devices) {

    /**
     * Checks the values: communicator options and devices given, a lead of at least 1, no negative
     * device; {@code devices} is copied.
     */
    public ThreadsOptions {
        Objects.requireNonNull(communicator, "ThreadsOptions: communicator options are null");
        Objects.requireNonNull(devices, "ThreadsOptions: devices is null");
        if (maxLead < 1) {
            throw new IllegalArgumentException("ThreadsOptions: maxLead " + maxLead + " must be at least 1");
        }
        devices = List.copyOf(devices);
        for (int rank = 0; rank < devices.size(); rank++) {
            if (devices.get(rank) < 0) {
                throw new IllegalArgumentException("ThreadsOptions: device " + devices.get(rank) + " of rank " + rank
                        + " is negative");
            }
        }
    }

    /**
     * The defaults.
     *
     * @return NCCL transports, default communicator options, a lead of 8 transactions, CPU pinning on,
     *         one rank per device
     */
    public static ThreadsOptions defaults() {
        return new ThreadsOptions(CommunicatorOptions.defaults(), false, false, 8, true, List.of());
    }

    /**
     * These options with other communicator options.
     *
     * @param options options of each rank's communicator
     * @return a copy with {@code communicator} replaced
     */
    public ThreadsOptions withCommunicator(CommunicatorOptions options) {
        return new ThreadsOptions(options, memcpyAllGather, memcpySendRecv, maxLead, pinCpus, devices);
    }

    /**
     * These options with the all-gathers as device-to-device copies, or not.
     *
     * @param enabled whether all-gathers use cudaMemcpyAsync
     * @return a copy with {@code memcpyAllGather} replaced
     */
    public ThreadsOptions withMemcpyAllGather(boolean enabled) {
        return new ThreadsOptions(communicator, enabled, memcpySendRecv, maxLead, pinCpus, devices);
    }

    /**
     * These options with the sends and receives as device-to-device copies, or not.
     *
     * @param enabled whether sends and receives use cudaMemcpyAsync
     * @return a copy with {@code memcpySendRecv} replaced
     */
    public ThreadsOptions withMemcpySendRecv(boolean enabled) {
        return new ThreadsOptions(communicator, memcpyAllGather, enabled, maxLead, pinCpus, devices);
    }

    /**
     * These options with another launch-queue lead.
     *
     * @param lead how many transactions a rank may run ahead (at least 1)
     * @return a copy with {@code maxLead} replaced
     */
    public ThreadsOptions withMaxLead(int lead) {
        return new ThreadsOptions(communicator, memcpyAllGather, memcpySendRecv, lead, pinCpus, devices);
    }

    /**
     * These options with CPU pinning on or off.
     *
     * @param pin whether to pin rank threads to their GPU's CPUs
     * @return a copy with {@code pinCpus} replaced
     */
    public ThreadsOptions withPinCpus(boolean pin) {
        return new ThreadsOptions(communicator, memcpyAllGather, memcpySendRecv, maxLead, pin, devices);
    }

    /**
     * These options with rank r on device {@code deviceOfRank[r]}: the pack has
     * {@code deviceOfRank.length} ranks, and several ranks may share a device (e.g.
     * {@code withDevices(0, 0, 0, 0)}: four ranks on device 0). The host emulation allows it; real
     * NCCL needs 2.30 or newer with {@code NCCL_MULTI_RANK_GPU_ENABLE=1} (2.28 refuses ranks of one
     * process on one GPU). No arguments go back to one rank per device.
     *
     * @param deviceOfRank the device of each rank, index = rank (none: one rank per device)
     * @return a copy with {@code devices} replaced
     */
    public ThreadsOptions withDevices(int... deviceOfRank) {
        Objects.requireNonNull(deviceOfRank, "withDevices: deviceOfRank is null");
        return new ThreadsOptions(communicator, memcpyAllGather, memcpySendRecv, maxLead, pinCpus,
                java.util.Arrays.stream(deviceOfRank).boxed().toList());
    }

    /** Whether two ranks share a device. */
    boolean sharesDevices() {
        return devices.stream().distinct().count() < devices.size();
    }

    boolean usesMemcpy() {
        return memcpyAllGather || memcpySendRecv;
    }
}
