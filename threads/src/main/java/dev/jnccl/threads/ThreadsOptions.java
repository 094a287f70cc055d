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

    /** Checks the values: communicator options given, a lead of at least 1. */
    public ThreadsOptions {
        Objects.requireNonNull(communicator, "ThreadsOptions: communicator options are null");
        if (maxLead < 1) {
            throw new IllegalArgumentException("ThreadsOptions: maxLead " + maxLead + " must be at least 1");
        }
    }

    /**
     * The defaults.
     *
     * @return NCCL transports, default communicator options, a lead of 8 transactions, CPU pinning on
     */
    public static ThreadsOptions defaults() {
        return new ThreadsOptions(CommunicatorOptions.defaults(), false, false, 8, true);
    }

    /**
     * These options with other communicator options.
     *
     * @param options options of each rank's communicator
     * @return a copy with {@code communicator} replaced
     */
    public ThreadsOptions withCommunicator(CommunicatorOptions options) {
        return new ThreadsOptions(options, memcpyAllGather, memcpySendRecv, maxLead, pinCpus);
    }

    /**
     * These options with the all-gathers as device-to-device copies, or not.
     *
     * @param enabled whether all-gathers use cudaMemcpyAsync
     * @return a copy with {@code memcpyAllGather} replaced
     */
    public ThreadsOptions withMemcpyAllGather(boolean enabled) {
        return new ThreadsOptions(communicator, enabled, memcpySendRecv, maxLead, pinCpus);
    }

    /**
     * These options with the sends and receives as device-to-device copies, or not.
     *
     * @param enabled whether sends and receives use cudaMemcpyAsync
     * @return a copy with {@code memcpySendRecv} replaced
     */
    public ThreadsOptions withMemcpySendRecv(boolean enabled) {
        return new ThreadsOptions(communicator, memcpyAllGather, enabled, maxLead, pinCpus);
    }

    /**
     * These options with another launch-queue lead.
     *
     * @param lead how many transactions a rank may run ahead (at least 1)
     * @return a copy with {@code maxLead} replaced
     */
    public ThreadsOptions withMaxLead(int lead) {
        return new ThreadsOptions(communicator, memcpyAllGather, memcpySendRecv, lead, pinCpus);
    }

    /**
     * These options with CPU pinning on or off.
     *
     * @param pin whether to pin rank threads to their GPU's CPUs
     * @return a copy with {@code pinCpus} replaced
     */
    public ThreadsOptions withPinCpus(boolean pin) {
        return new ThreadsOptions(communicator, memcpyAllGather, memcpySendRecv, maxLead, pin);
    }

    boolean usesMemcpy() {
        return memcpyAllGather || memcpySendRecv;
    }
}
