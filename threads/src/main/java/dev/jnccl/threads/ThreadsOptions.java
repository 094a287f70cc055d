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

    /** Checks the options; {@code devices} is copied. */
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

    /** NCCL transports, default communicator options, a lead of 8 transactions, CPU pinning on, a rank per device. */
    public static ThreadsOptions defaults() {
        return new ThreadsOptions(CommunicatorOptions.defaults(), false, false, 8, true, List.of());
    }

    /** These options with {@code options} for each rank's communicator. */
    public ThreadsOptions withCommunicator(CommunicatorOptions options) {
        return new ThreadsOptions(options, memcpyAllGather, memcpySendRecv, maxLead, pinCpus, devices);
    }

    /** These options with the memcpy all-gather transport on or off. */
    public ThreadsOptions withMemcpyAllGather(boolean enabled) {
        return new ThreadsOptions(communicator, enabled, memcpySendRecv, maxLead, pinCpus, devices);
    }

    /** These options with the memcpy send/recv transport on or off. */
    public ThreadsOptions withMemcpySendRecv(boolean enabled) {
        return new ThreadsOptions(communicator, memcpyAllGather, enabled, maxLead, pinCpus, devices);
    }

    /** These options with a lead of at most {@code lead} transactions. */
    public ThreadsOptions withMaxLead(int lead) {
        return new ThreadsOptions(communicator, memcpyAllGather, memcpySendRecv, lead, pinCpus, devices);
    }

    /** These options with CPU pinning on or off. */
    public ThreadsOptions withPinCpus(boolean pin) {
        return new ThreadsOptions(communicator, memcpyAllGather, memcpySendRecv, maxLead, pin, devices);
    }

    /**
     * These options with rank r on device {@code deviceOfRank[r]}: the pack has
     * {@code deviceOfRank.length} ranks, and several ranks may share a device (e.g.
     * {@code withDevices(0, 0, 0, 0)}: four ranks on device 0). The host emulation allows it; real
     * NCCL needs 2.30 or newer with {@code NCCL_MULTI_RANK_GPU_ENABLE=1} (2.28 refuses ranks of one
     * process on one GPU). No arguments go back to one rank per device.
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
