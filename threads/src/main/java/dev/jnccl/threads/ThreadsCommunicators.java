package dev.jnccl.threads;

import dev.jnccl.Backend;
import dev.jnccl.Communicator;
import dev.jnccl.JncclRuntime;
import dev.jnccl.NcclException;
import dev.jnccl.UniqueId;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.internal.VisibleDevices;
import dev.jnccl.spi.Modes;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
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
 * So does a rank whose work returns while a peer waits for it: in a host-side call at once, and in
 * collectives it executed fewer of at the peer's next watchdog poll (with the watchdog on), the
 * exception naming that rank and both counts. When a watchdog or a host-side deadline ends a hang,
 * the rank that noticed reads every rank's summary from the pack first, and the verdict that names
 * the culprit is the first line of every rank's exception and of {@link ThreadsPack#join()}'s (see
 * {@link dev.jnccl.Diagnosis}).
 *
 * <p>With {@link ThreadsOptions#withContinueWithoutFailedRanks(int)} a rank whose work throws, or
 * whose thread is interrupted, is lost instead: the others get {@link dev.jnccl.RankLostException}
 * from jnccl and go on with its {@code recover()} (see that option).
 */
public final class ThreadsCommunicators {
    private static final Logger LOG = LoggerFactory.getLogger(ThreadsCommunicators.class);

    private ThreadsCommunicators() {}

    /**
     * Starts one rank per GPU and returns at once.
     *
     * @param gpus    number of GPUs (ranks); 0 means all visible devices, or the ranks of
     *                {@link ThreadsOptions#withDevices(int...)} when set
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
        int[] deviceOfRank = deviceOfRank(gpus, options, visible);
        int size = deviceOfRank.length;
        if (options.minWorld() > size) {
            throw new IllegalArgumentException("launch: ThreadsOptions.minWorld " + options.minWorld() + " is more than"
                    + " the pack's " + size + " ranks (allowed: 0 for off, or 1 to " + size + ")");
        }
        boolean realGpu = JncclRuntime.query().backend() == Backend.CUDA;
        UniqueId id = UniqueId.generate();
        PackState state = new PackState(size, options.communicator().closeTimeout(), options.minWorld());
        Replacements replacements = replacements(options, visible, state, work);
        Throwable[] errors = new Throwable[size];
        List<Thread> threads = new ArrayList<>(size);
        for (int rank = 0; rank < size; rank++) {
            int r = rank;
            // Daemon: a pack whose launcher's caller has gone (main returned, join abandoned) must not
            // keep the JVM alive.
            threads.add(Thread.ofPlatform().name("jnccl-rank-" + rank).daemon(true).unstarted(
                    () -> runRank(r, deviceOfRank, id, options, work, state, errors, realGpu)));
        }
        threads.forEach(Thread::start);
        return new ThreadsPack(List.copyOf(threads), state, errors, replacements);
    }

    /** The launch's spare devices, checked (null without any); set on the root pack. */
    private static Replacements replacements(ThreadsOptions options, int visible, PackState state,
                                             Consumer<Communicator> work) {
        List<Integer> spares = options.replacementDevices();
        if (spares.isEmpty()) {
            return null;
        }
        if (!options.continuesWithoutFailedRanks()) {
            throw new IllegalArgumentException("launch: ThreadsOptions.replacementDevices " + spares + " need"
                    + " ThreadsOptions.withContinueWithoutFailedRanks (minWorld 1 or more; it is 0): only a lost rank"
                    + " is replaced");
        }
        for (int device : spares) {
            if (device >= visible) {
                throw new IllegalArgumentException("launch: replacement device " + device + " of " + spares
                        + " is not visible (allowed: 0 to " + (visible - 1) + ", " + VisibleDevices.setting() + ")");
            }
        }
        Replacements replacements = new Replacements(state, options, work);
        state.replacements(replacements);
        return replacements;
    }

    /**
     * Whether the calling thread runs the work of a replacement rank (see {@link
     * ThreadsOptions#withReplacementDevices}): its communicator is the grown world's, which the
     * survivors reach by {@link dev.jnccl.RankLostException#recover()}; its work loads the state
     * from a healthy peer (e.g. joins the broadcast the survivors make after recovering) instead of
     * starting afresh.
     *
     * @return true inside a replacement rank's work, false elsewhere (an original rank, any other thread)
     */
    public static boolean isReplacement() {
        return Replacements.REPLACEMENT.orElse(Boolean.FALSE);
    }

    /** The device of each rank: {@link ThreadsOptions#devices()} when set, else rank r on device r. */
    private static int[] deviceOfRank(int gpus, ThreadsOptions options, int visible) {
        String visibleNote = " (" + VisibleDevices.setting() + ")";
        if (options.devices().isEmpty()) {
            int size = gpus == 0 ? visible : gpus;
            if (size > visible) {
                throw new IllegalArgumentException("launch: " + size + " GPUs requested but only " + visible
                        + " visible" + visibleNote + "; ThreadsOptions.withDevices puts several ranks on one device");
            }
            int[] devices = new int[size];
            for (int rank = 0; rank < size; rank++) {
                devices[rank] = rank;
            }
            return devices;
        }
        List<Integer> devices = options.devices();
        if (gpus != 0 && gpus != devices.size()) {
            throw new IllegalArgumentException("launch: gpus " + gpus + " does not match the " + devices.size()
                    + " ranks of ThreadsOptions.devices " + devices + " (pass 0 or " + devices.size() + ")");
        }
        int[] result = new int[devices.size()];
        for (int rank = 0; rank < result.length; rank++) {
            int device = devices.get(rank);
            if (device >= visible) {
                throw new IllegalArgumentException("launch: rank " + rank + " is on device " + device + " but only "
                        + visible + " devices are visible" + visibleNote);
            }
            result[rank] = device;
        }
        return result;
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

    private static void runRank(int rank, int[] deviceOfRank, UniqueId id, ThreadsOptions options,
                                Consumer<Communicator> work, PackState state, Throwable[] errors, boolean realGpu) {
        int size = deviceOfRank.length;
        int device = deviceOfRank[rank];
        Communicator communicator = null;
        try {
            Cuda.setDevice(device);
            if (options.pinCpus()) {
                state.reportAffinity(rank, CpuAffinity.pin(rank, device, realGpu));
            }
            if (options.usesMemcpy()) {
                enablePeerAccess(device, deviceOfRank);
            }
            communicator = createCommunicator(id, rank, device, options, state, deviceOfRank);
            state.working(rank, true);
            try {
                work.accept(communicator);
            } finally {
                if (state.working(rank, false)) {
                    Thread.interrupted(); // the pack's own interrupt (it failed): not for the close below
                }
            }
            // Ranks close together: a rank finalizing early would leave peers' last operations alone.
            // Meanwhile a peer that executed more than this rank learns it from the pack (its watchdog).
            state.finish(rank);
        } catch (Throwable t) {
            errors[rank] = t;
            // With ThreadsOptions.minWorld the pack may go on without a rank that fails in its work (lose
            // logs it); one that fails in init fails the pack: the others have nothing to recover yet.
            boolean first = communicator == null ? state.fail(rank, t) : state.lose(rank, t);
            if (first && state.failure() != null) {
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

    /**
     * The rank's communicator. When ranks share a device and NCCL refuses that ("Duplicate GPU
     * detected", NCCL before 2.30 or without NCCL_MULTI_RANK_GPU_ENABLE=1), the exception says
     * what to set or load. It names the ranks that share a device from the placement, not from the
     * refused rank's own device: NCCL may report the refusal to every rank of the communicator,
     * including ranks alone on their device (the host emulation does).
     */
    private static Communicator createCommunicator(UniqueId id, int rank, int device, ThreadsOptions options,
                                                          PackState state, int[] deviceOfRank) {
        try {
            return Modes.communicator(id, rank, deviceOfRank.length, device, options.communicator(),
                    ThreadsHost.parts(state, options, rank));
        } catch (NcclException e) {
            if (!options.sharesDevices() || !e.getMessage().contains("Duplicate GPU")) {
                throw e;
            }
            throw new IllegalStateException("launch: " + sharedDevices(deviceOfRank) + " (ThreadsOptions.devices "
                    + options.devices() + ") and NCCL " + JncclRuntime.query().nccl() + " refuses several ranks of"
                    + " one process on one GPU (reported to rank " + rank + "). NCCL 2.30 or newer allows it with the"
                    + " environment variable NCCL_MULTI_RANK_GPU_ENABLE=1 (load it with"
                    + " -Djnccl.nccl.library=/path/libnccl.so.2); otherwise use one rank per device or one process"
                    + " per rank (MPI mode)", e);
        }
    }

    /**
     * Every device that several ranks share, as {@code ranks [0, 1] share device 1}, joined with
     * {@code " and "} in device order; empty when no device is shared.
     */
    static String sharedDevices(int[] deviceOfRank) {
        Map<Integer, List<Integer>> ranksOfDevice = new TreeMap<>();
        for (int rank = 0; rank < deviceOfRank.length; rank++) {
            ranksOfDevice.computeIfAbsent(deviceOfRank[rank], d -> new ArrayList<>()).add(rank);
        }
        List<String> shared = new ArrayList<>();
        ranksOfDevice.forEach((device, ranks) -> {
            if (ranks.size() > 1) {
                shared.add("ranks " + ranks + " share device " + device);
            }
        });
        return String.join(" and ", shared);
    }

    /** Peer access from {@code device} to every other device of the pack (ranks on the same device need none). */
    private static void enablePeerAccess(int device, int[] deviceOfRank) {
        int[] peers = java.util.Arrays.stream(deviceOfRank).distinct().toArray();
        for (int peer : peers) {
            if (peer != device && Cuda.canAccessPeer(device, peer)) {
                Cuda.enablePeerAccess(peer);
            }
        }
    }
}
