package dev.jnccl.threads;

import dev.jnccl.CommunicatorOptions;
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
 */
public record ThreadsOptions(CommunicatorOptions communicator, boolean memcpyAllGather, boolean memcpySendRecv,
                             int maxLead, boolean pinCpus) {

    public ThreadsOptions {
        Objects.requireNonNull(communicator, "ThreadsOptions: communicator options are null");
        if (maxLead < 1) {
            throw new IllegalArgumentException("ThreadsOptions: maxLead " + maxLead + " must be at least 1");
        }
    }

    /** NCCL transports, default communicator options, a lead of 8 transactions, CPU pinning on. */
    public static ThreadsOptions defaults() {
        return new ThreadsOptions(CommunicatorOptions.defaults(), false, false, 8, true);
    }

    public ThreadsOptions withCommunicator(CommunicatorOptions options) {
        return new ThreadsOptions(options, memcpyAllGather, memcpySendRecv, maxLead, pinCpus);
    }

    public ThreadsOptions withMemcpyAllGather(boolean enabled) {
        return new ThreadsOptions(communicator, enabled, memcpySendRecv, maxLead, pinCpus);
    }

    public ThreadsOptions withMemcpySendRecv(boolean enabled) {
        return new ThreadsOptions(communicator, memcpyAllGather, enabled, maxLead, pinCpus);
    }

    public ThreadsOptions withMaxLead(int lead) {
        return new ThreadsOptions(communicator, memcpyAllGather, memcpySendRecv, lead, pinCpus);
    }

    public ThreadsOptions withPinCpus(boolean pin) {
        return new ThreadsOptions(communicator, memcpyAllGather, memcpySendRecv, maxLead, pin);
    }

    boolean usesMemcpy() {
        return memcpyAllGather || memcpySendRecv;
    }
}
