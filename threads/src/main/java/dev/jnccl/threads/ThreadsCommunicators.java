package dev.jnccl.threads;

import dev.jnccl.Communicator;
import dev.jnccl.UniqueId;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.internal.Native;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Threads mode: one JVM drives every GPU of the machine, one platform thread per GPU (named
 * {@code jnccl-rank-<r>}). Each thread selects its device, pins itself to that GPU's local CPUs
 * (when NVML is there), builds its rank's communicator from one shared unique id, and runs the
 * work.
 *
 * <p>If any rank fails (in init, in its work, in a transaction, in a barrier), every other rank
 * waiting in a barrier or host gather is released with an exception naming the failed rank, all
 * communicators of the pack are aborted, and {@link ThreadsPack#join()} rethrows the first failure.
 */
public final class ThreadsCommunicators {
    private static final Logger LOG = LoggerFactory.getLogger(ThreadsCommunicators.class);

    private ThreadsCommunicators() {}

    /**
     * Starts one rank per GPU and returns at once.
     *
     * @param gpus    number of GPUs (ranks); 0 means all visible devices
     * @param options threads-mode options
     * @param work    what each rank runs with its communicator (closed afterwards)
     * @return the running pack, to be joined or closed
     */
    public static ThreadsPack launch(int gpus, ThreadsOptions options, Consumer<Communicator> work) {
        Objects.requireNonNull(options, "launch: options are null");
        Objects.requireNonNull(work, "launch: work is null");
        if (gpus < 0) {
            throw new IllegalArgumentException("launch: gpus " + gpus + " is negative (0 means all visible devices)");
        }
        int visible = Cuda.deviceCount();
        if (visible == 0) {
            throw new IllegalArgumentException("launch: no CUDA device is visible");
        }
        int size = gpus == 0 ? visible : gpus;
        if (size > visible) {
            throw new IllegalArgumentException("launch: " + size + " GPUs requested but only " + visible
                    + " visible (CUDA_VISIBLE_DEVICES=" + System.getenv("CUDA_VISIBLE_DEVICES") + ")");
        }
        boolean realGpu = Native.libraries().backend().id().equals("cuda");
        UniqueId id = UniqueId.generate();
        PackState state = new PackState(size, options.communicator().closeTimeout());
        Throwable[] errors = new Throwable[size];
        List<Thread> threads = new ArrayList<>(size);
        for (int rank = 0; rank < size; rank++) {
            int r = rank;
            threads.add(Thread.ofPlatform().name("jnccl-rank-" + rank).unstarted(
                    () -> runRank(r, size, id, options, work, state, errors, realGpu)));
        }
        threads.forEach(Thread::start);
        return new ThreadsPack(List.copyOf(threads), state, errors);
    }

    /**
     * {@link #launch} then {@link ThreadsPack#join()}.
     *
     * @param gpus number of GPUs (ranks); 0 means all visible devices
     * @param options threads-mode options
     * @param work what each rank runs with its communicator (closed afterwards)
     */
    public static void run(int gpus, ThreadsOptions options, Consumer<Communicator> work) {
        try (ThreadsPack pack = launch(gpus, options, work)) {
            pack.join();
        }
    }

    private static void runRank(int rank, int size, UniqueId id, ThreadsOptions options, Consumer<Communicator> work,
                                PackState state, Throwable[] errors, boolean realGpu) {
        ThreadsCommunicator communicator = null;
        try {
            Cuda.setDevice(rank);
            if (options.pinCpus()) {
                state.reportAffinity(rank, CpuAffinity.pin(rank, rank, realGpu));
            }
            if (options.usesMemcpy()) {
                enablePeerAccess(rank, size);
            }
            communicator = new ThreadsCommunicator(id, rank, size, rank, options, state);
            state.register(rank, communicator);
            work.accept(communicator);
            // Ranks close together: a rank finalizing early would leave peers' last operations alone.
            state.barrier("finish", rank);
        } catch (Throwable t) {
            errors[rank] = t;
            if (state.fail(rank, t)) {
                LOG.error("rank {} failed; aborting the pack", rank, t);
            }
        } finally {
            state.finished(rank);
            if (communicator != null) {
                try {
                    communicator.close();
                } catch (Throwable t) {
                    if (errors[rank] == null) {
                        errors[rank] = t;
                        state.fail(rank, t);
                    } else {
                        errors[rank].addSuppressed(t);
                    }
                }
            }
            state.leave();
        }
    }

    private static void enablePeerAccess(int rank, int size) {
        for (int peer = 0; peer < size; peer++) {
            if (peer != rank && Cuda.canAccessPeer(rank, peer)) {
                Cuda.enablePeerAccess(peer);
            }
        }
    }
}
