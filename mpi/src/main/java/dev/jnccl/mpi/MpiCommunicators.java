package dev.jnccl.mpi;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.UniqueId;
import dev.jnccl.spi.Modes;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.internal.Deadlines;
import dev.jnccl.internal.VisibleDevices;
import dev.jnccl.mpi.internal.JvmSignalHandlers;
import dev.jnccl.mpi.internal.MpiLibrary;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.function.Consumer;
import java.util.function.Function;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * MPI mode: one process per GPU, started by {@code mpirun} / {@code srun}; MPI carries the host
 * side (unique-id broadcast, barrier, host gathers), NCCL the GPU traffic.
 *
 * <p><b>MPI library.</b> The system property {@code jnccl.mpi.library} or the environment variable
 * {@code JNCCL_MPI_LIBRARY} names the file; else the dynamic linker's {@code libmpi.so.40} (Open
 * MPI), {@code libmpi.so.12} (MPICH ABI: Intel MPI, MVAPICH, Cray), {@code libmpich.so.12}. Open MPI
 * and the MPICH ABI are told apart by their symbols; which one runs is logged at INFO. Use the
 * library that belongs to the launcher.
 *
 * <p><b>Initialisation.</b> If MPI is not initialised yet, {@link #create} calls
 * {@code MPI_Init_thread} asking for {@code MPI_THREAD_MULTIPLE}: jnccl's watchdog and the abort path
 * call {@code MPI_Abort} from another thread than the one that may sit in a barrier. Less is refused
 * with an exception. Then jnccl owns MPI and finalizes it in {@link Communicator#close()}, unless a
 * failure is in flight (an aborted communicator: the job was ended instead); the finalize is bounded
 * by the close timeout (past it the process halts with exit code 1, so the launcher ends the job). If
 * the application initialised MPI itself (at {@code MPI_THREAD_MULTIPLE}), jnccl uses it and never
 * finalizes it. {@code MPI_Init_thread} is outside jnccl's deadlines: it is a blocking call with no
 * bounded or non-blocking form, and the launcher's wiring of the processes may wait inside it for
 * all of them; a process that never starts or dies there is the launcher's to report.
 *
 * <p><b>Deadline of create.</b> After MPI is up, every wait of {@link #create} for the other
 * processes ends at {@link dev.jnccl.CommunicatorOptions#initTimeout()} with a
 * {@link dev.jnccl.CommunicatorAbortedException} naming the ranks that did not arrive (or on an
 * interrupt, the interrupt status kept): first each process sends a zero-byte message with tag
 * {@value #CREATE_TAG} on {@code MPI_COMM_WORLD} to every other one and receives theirs (before jnccl
 * has a communicator of its own this is the only way to learn who is missing: while {@code create}
 * runs, the application must not receive messages of that tag, or of {@code MPI_ANY_TAG}, on
 * {@code MPI_COMM_WORLD} on another thread); then {@code MPI_Comm_idup} makes jnccl's communicator;
 * then one all-gather exchanges every process's node name and rank 0's NCCL unique id. All three are
 * non-blocking MPI calls polled with backoff; NCCL's own initialisation is bounded by the same
 * timeout.
 *
 * <p><b>Ranks and devices.</b> The rank and world are those of {@code MPI_COMM_WORLD}; rank 0 makes
 * the NCCL unique id. The device is the node-local rank (the rank among the processes whose
 * {@code MPI_Get_processor_name} is this process's), never the global rank; {@link
 * MpiOptions#withDevice(int)}, the system property {@code jnccl.device} or the environment variable
 * {@code JNCCL_DEVICE} (in this order) override it.
 *
 * <p><b>Failures.</b> Every MPI call is checked ({@code MPI_ERRORS_RETURN}; an {@link MpiException}
 * carries MPI's error string, the function and the rank). When this process's communicator is
 * aborted (its watchdog, a failed transaction, {@link Communicator#abort}), the NCCL communicator is
 * aborted and then {@code MPI_Abort} ends the whole job. An exception in the application's own code
 * ends the job through {@link #run(MpiOptions, Consumer)}, which aborts for it; code that uses
 * {@link #create} directly should call {@link Communicator#abort} on failure (a process that simply
 * exits non-zero is noticed by mpirun, later).
 *
 * <p><b>A process that dies.</b> By default the launcher or jnccl ends the job. With
 * {@link MpiOptions#withContinueWithoutFailedRanks(int)} and a launcher that keeps the job running
 * (Open MPI's {@code mpirun --enable-recovery}), the survivors get
 * {@link dev.jnccl.RankLostException} instead and go on with {@code recover()}.
 */
public final class MpiCommunicators {
    private static final Logger LOG = LoggerFactory.getLogger(MpiCommunicators.class);
    /** The system property naming this process's CUDA device: {@value}. */
    public static final String DEVICE_PROPERTY = "jnccl.device";
    /** The environment variable naming this process's CUDA device: {@value}. */
    public static final String DEVICE_ENVIRONMENT = "JNCCL_DEVICE";
    /**
     * The tag of create's arrival messages on {@code MPI_COMM_WORLD}: {@value} (MPI guarantees tags
     * up to 32767; jnccl's other messages travel on communicators of its own).
     */
    public static final int CREATE_TAG = 0x6a6f;

    private MpiCommunicators() {}

    /**
     * Which MPI this process loads, for reports: the ABI, MPI_Get_library_version's first line and the
     * file (e.g. "Open MPI ABI, Open MPI v4.1.4 ..., /usr/lib/x86_64-linux-gnu/libmpi.so.40 (dynamic
     * linker)"). Loads the library; initialises nothing.
     *
     * @return the description
     * @throws dev.jnccl.NativeLibraryException when no MPI library can be loaded
     */
    public static String library() {
        MpiLibrary mpi = MpiLibrary.load();
        return mpi.abi() + ", " + mpi.libraryVersion() + ", " + mpi.describe();
    }

    /**
     * This process's communicator with the default options. See {@link #create(MpiOptions)}.
     *
     * @return this process's communicator, to be closed by the caller
     * @throws MpiException when an MPI call fails
     * @throws IllegalStateException when MPI gives less than MPI_THREAD_MULTIPLE, was finalized, or
     *         this node has more processes than visible devices (without a device override)
     */
    public static Communicator create() {
        return create(MpiOptions.defaults());
    }

    /**
     * This process's communicator: initialises MPI if nobody did, waits for every process (bounded by
     * the init timeout, see the class comment), sends the NCCL unique id from rank 0, picks the device
     * and creates the NCCL communicator of all processes of MPI_COMM_WORLD. Every process of the job
     * must call it.
     *
     * @param options MPI-mode options
     * @return this process's communicator, to be closed by the caller
     * @throws MpiException when an MPI call fails
     * @throws IllegalStateException when MPI gives less than MPI_THREAD_MULTIPLE, was finalized, or
     *         this node has more processes than visible devices (without a device override)
     * @throws dev.jnccl.CommunicatorAbortedException when a process did not arrive within the init
     *         timeout (the message names it), or on interrupt
     * @throws IllegalArgumentException when the device override or {@code jnccl.device} is not a
     *         visible device, or {@link MpiOptions#minWorld()} exceeds the job's size
     */
    public static Communicator create(MpiOptions options) {
        Objects.requireNonNull(options, "create: options are null");
        MpiLibrary mpi = MpiLibrary.load();
        boolean owner = initialize(mpi);
        guardJvmSignals();
        MpiLibrary.Handle comm = null;
        try {
            MpiLibrary.Handle world = mpi.world();
            int rank = mpi.rank(world);
            int size = mpi.size(world);
            checkLauncher(mpi.abi(), mpi.describe(), size, System::getenv);
            checkMinWorld(options, size);
            mpi.rememberRank(rank);
            // One deadline for every wait below (see the class comment).
            MpiLibrary.Wait wait = new MpiLibrary.Wait("create",
                    Deadlines.toNanos(options.communicator().initTimeout()), () -> null);
            mpi.arrive(world, rank, size, CREATE_TAG, "rank " + rank, "", wait);
            comm = mpi.idup(world, wait);
            mpi.setErrorsReturn(comm);
            byte[] name = mpi.processorName().getBytes(StandardCharsets.UTF_8);
            byte[] mine = rank == 0 ? concat(UniqueId.generate().bytes(), name) : name;
            List<byte[]> all = mpi.allGather(mine, comm, wait);
            byte[] id = Arrays.copyOf(all.getFirst(), UniqueId.BYTES);
            List<String> nodes = new ArrayList<>(size);
            for (int r = 0; r < size; r++) {
                byte[] bytes = all.get(r);
                int from = r == 0 ? UniqueId.BYTES : 0;
                nodes.add(new String(bytes, from, bytes.length - from, StandardCharsets.UTF_8));
            }
            int[] local = nodeLocal(nodes, rank);
            int localRank = local[0];
            int localSize = local[1];
            String[] source = new String[1];
            int device = device(options, localRank, localSize, source);
            LOG.info("jnccl MPI mode: {} ({}), {}, thread level MPI_THREAD_MULTIPLE, MPI {} by {}; rank {} of {},"
                            + " node-local rank {} of {}, device {} ({})", mpi.abi(), mpi.libraryVersion(), mpi.describe(),
                    owner ? "initialised" : "already initialised", owner ? "jnccl" : "the application", rank, size,
                    localRank, localSize, device, source[0]);
            return Modes.communicator(UniqueId.fromBytes(id), rank, size, device, options.communicator(),
                    MpiHost.parts(mpi, comm, rank, size, owner ? options.communicator().closeTimeout() : null,
                            options.minWorld()));
        } catch (RuntimeException | Error e) {
            // An all-gather left pending at its deadline still uses the communicator: not freed then.
            if (comm != null && !(e instanceof CommunicatorAbortedException)) {
                try {
                    mpi.free(comm);
                } catch (RuntimeException suppressed) {
                    e.addSuppressed(suppressed);
                }
            }
            throw e;
        }
    }

    /**
     * Runs {@code work} with this process's communicator and closes it: the way to run a rank so
     * that a failure ends the whole job at once. If {@code work} (or the creation) throws, the
     * communicator is aborted and {@code MPI_Abort} ends every process of the job with exit code 1
     * (after logging the exception at ERROR); this method then does not return. Without a failure
     * the communicator is closed (and MPI finalized, if jnccl initialised it).
     *
     * @param options MPI-mode options
     * @param work what this rank runs with its communicator
     */
    public static void run(MpiOptions options, Consumer<Communicator> work) {
        Objects.requireNonNull(options, "run: options are null");
        Objects.requireNonNull(work, "run: work is null");
        Communicator communicator;
        try {
            communicator = create(options);
        } catch (RuntimeException | Error e) {
            abortJob("creating the communicator failed", e);
            throw e;
        }
        try {
            work.accept(communicator);
        } catch (RuntimeException | Error e) {
            LOG.error("rank {} of {}: the work failed; aborting the communicator and the MPI job",
                    communicator.rank(), communicator.worldSize(), e);
            // The abort ends in MPI_Abort (MpiHost.aborted); an earlier abort already did.
            communicator.abort("rank " + communicator.rank() + " failed: " + e);
            // The abort's own end of the job, once the peers have aborted too (bounded); the abort
            // may still be in NCCL's on another thread (the watchdog's), bounded by the close timeout.
            JobEnd.await(communicator.options().closeTimeout().toMillis() + 1_000);
            abortJob("the work failed", e);
            throw e;
        }
        communicator.close();
    }

    /** MPI_Abort on MPI_COMM_WORLD when MPI is up (logs first: the process ends here). */
    private static void abortJob(String what, Throwable failure) {
        MpiLibrary mpi;
        try {
            mpi = MpiLibrary.load();
            if (!mpi.initialized() || mpi.finalized()) {
                return;
            }
        } catch (RuntimeException e) {
            failure.addSuppressed(e);
            return;
        }
        LOG.error("{}; ending the MPI job (MPI_Abort, exit code {})", what, MpiHost.ABORT_EXIT_CODE, failure);
        mpi.abort(mpi.world(), MpiHost.ABORT_EXIT_CODE);
    }

    /**
     * After MPI_Init: the JVM's SIGSEGV, SIGBUS, SIGILL and SIGFPE handlers must still be the JVM's
     * (its safepoints and null checks fault on purpose). UCX's are handed back; others are reported.
     */
    private static void guardJvmSignals() {
        JvmSignalHandlers.Restored restored = JvmSignalHandlers.restoreJvmHandlers();
        if (!restored.handedBack().isEmpty()) {
            LOG.warn("MPI's UCX had replaced the JVM's signal handlers ({}); jnccl handed them back to the JVM,"
                    + " which faults on purpose for safepoints and null checks (with UCX's handler it dies with a"
                    + " fatal error in Java code). {} was {} at JVM start. UCX installs them when MPI is loaded"
                    + " before jnccl or {} names them: give every rank an empty one (Open MPI: mpirun -x {}="
                    + "; MPICH: mpirun -genv {} \"\")", restored.handedBack(), JvmSignalHandlers.UCX_ERROR_SIGNALS,
                    Objects.requireNonNullElse(System.getenv(JvmSignalHandlers.UCX_ERROR_SIGNALS), "unset"),
                    JvmSignalHandlers.UCX_ERROR_SIGNALS, JvmSignalHandlers.UCX_ERROR_SIGNALS,
                    JvmSignalHandlers.UCX_ERROR_SIGNALS);
        }
        if (!restored.stillForeign().isEmpty()) {
            LOG.warn("After MPI_Init the JVM's handlers of these signals belong to another library: {}. The JVM"
                    + " faults on purpose for safepoints and null checks, so this process may die with a fatal"
                    + " error (SIGSEGV in Java code). Keep that library from installing them, or start the JVM"
                    + " with LD_PRELOAD=$JAVA_HOME/lib/libjsig.so (signal chaining)", restored.stillForeign());
        }
    }

    /** Initialises MPI at MPI_THREAD_MULTIPLE if nobody did; returns whether jnccl did (and so finalizes it). */
    private static boolean initialize(MpiLibrary mpi) {
        if (mpi.finalized()) {
            throw new IllegalStateException("create: MPI was already finalized in this process (" + mpi
                    + "); MPI can be initialised only once per process, so create the communicator before finalizing"
                    + " (jnccl finalizes MPI when it initialised it and the communicator is closed)");
        }
        if (mpi.initialized()) {
            int level = mpi.queryThread();
            if (level < MpiLibrary.THREAD_MULTIPLE) {
                throw new IllegalStateException("create: the application initialised MPI with "
                        + MpiLibrary.threadLevelName(level) + "; jnccl needs MPI_THREAD_MULTIPLE (its watchdog and"
                        + " abort path call MPI_Abort from their own thread while another may be in a barrier)."
                        + " Initialise MPI with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...) or let jnccl do it");
            }
            return false;
        }
        int provided = mpi.initThread(MpiLibrary.THREAD_MULTIPLE);
        if (provided < MpiLibrary.THREAD_MULTIPLE) {
            try {
                mpi.finalizeMpi();
            } catch (MpiException e) {
                LOG.warn("MPI_Finalize after the refused thread level failed", e);
            }
            throw new IllegalStateException("create: " + mpi + " provides only " + MpiLibrary.threadLevelName(provided)
                    + " but jnccl needs MPI_THREAD_MULTIPLE (its watchdog and abort path call MPI_Abort from their own"
                    + " thread). Use an MPI built with thread support (Open MPI and MPICH packages of Linux"
                    + " distributions are), or check that the library matches the launcher");
        }
        return true;
    }

    /**
     * This process's rank among the processes of its node, and their number: {@code nodes} is every
     * rank's node name (MPI_Get_processor_name), in rank order.
     */
    static int[] nodeLocal(List<String> nodes, int rank) {
        String mine = nodes.get(rank);
        int localRank = 0;
        int localSize = 0;
        for (int r = 0; r < nodes.size(); r++) {
            if (nodes.get(r).equals(mine)) {
                localRank += r < rank ? 1 : 0;
                localSize++;
            }
        }
        return new int[] {localRank, localSize};
    }

    private static byte[] concat(byte[] first, byte[] second) {
        byte[] both = Arrays.copyOf(first, first.length + second.length);
        System.arraycopy(second, 0, both, first.length, second.length);
        return both;
    }

    /** Refuses a minimum of survivors above the job's size (before any wait for the other processes). */
    static void checkMinWorld(MpiOptions options, int size) {
        if (options.minWorld() > size) {
            throw new IllegalArgumentException("create: MpiOptions.withContinueWithoutFailedRanks(" + options.minWorld()
                    + ") exceeds the job's " + size + " processes: allowed 0 (off) or 1 to " + size);
        }
    }

    /** The world size each launcher announces in the environment of the processes it starts, and who sets it. */
    private static final List<String[]> LAUNCHER_SIZES = List.of(
            new String[] {"OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun (mpirun.openmpi)"},
            new String[] {"PMI_SIZE", "an MPICH-style launcher (mpirun.mpich / Hydra, srun --mpi=pmi2)"});

    /**
     * Refuses a job whose launcher is of another MPI than the loaded library: such a library does not
     * see the launcher, so every process comes up as "rank 0 of 1" and would train alone, silently.
     * The launcher's own world size in the environment gives it away.
     */
    static void checkLauncher(MpiLibrary.Abi abi, String library, int size, Function<String, String> environment) {
        if (size != 1) {
            return;
        }
        for (String[] launcher : LAUNCHER_SIZES) {
            String value = environment.apply(launcher[0]);
            int started;
            try {
                started = value == null ? 1 : Integer.parseInt(value.strip());
            } catch (NumberFormatException e) {
                continue;
            }
            if (started > 1) {
                String own = abi == MpiLibrary.Abi.OPEN_MPI ? "mpirun.openmpi" : "mpirun.mpich";
                throw new IllegalStateException("create: MPI says this process is rank 0 of 1, but its launcher started "
                        + started + " processes (" + launcher[0] + "=" + value + ", set by " + launcher[1]
                        + "): the launcher is of another MPI than the library jnccl loaded, " + library + " (" + abi
                        + "). Start the job with that library's launcher (" + own + "), or load the library of this"
                        + " launcher with -D" + MpiLibrary.PROPERTY + "=/path/to/libmpi.so (environment "
                        + MpiLibrary.ENVIRONMENT + ")");
            }
        }
    }

    /** The device: option, property, environment, node-local rank; {@code source[0]} says which. */
    static int device(MpiOptions options, int localRank, int localSize, String[] source) {
        int visible = Cuda.deviceCount();
        String visibleNote = VisibleDevices.setting();
        Integer chosen = null;
        if (options.device().isPresent()) {
            chosen = options.device().getAsInt();
            source[0] = "MpiOptions.withDevice";
        } else {
            String property = System.getProperty(DEVICE_PROPERTY);
            String environment = System.getenv(DEVICE_ENVIRONMENT);
            if (property != null && !property.isBlank()) {
                chosen = parseDevice(property, "system property " + DEVICE_PROPERTY);
                source[0] = "system property " + DEVICE_PROPERTY;
            } else if (environment != null && !environment.isBlank()) {
                chosen = parseDevice(environment, "environment variable " + DEVICE_ENVIRONMENT);
                source[0] = "environment variable " + DEVICE_ENVIRONMENT;
            }
        }
        if (chosen != null) {
            if (chosen >= visible) {
                throw new IllegalArgumentException("create: device " + chosen + " (" + source[0] + ") but only "
                        + visible + " device(s) are visible (" + visibleNote + ")");
            }
            return chosen;
        }
        if (localRank >= visible) {
            throw new IllegalStateException("create: node-local rank " + localRank + " (of " + localSize
                    + " processes on this node) has no device of its own: " + visible + " device(s) visible ("
                    + visibleNote + "). Start at most " + visible + " processes per node, or choose the device with"
                    + " MpiOptions.withDevice, -D" + DEVICE_PROPERTY + " or " + DEVICE_ENVIRONMENT);
        }
        source[0] = "node-local rank";
        return localRank;
    }

    private static int parseDevice(String text, String where) {
        try {
            int device = Integer.parseInt(text.strip());
            if (device < 0) {
                throw new IllegalArgumentException("create: " + where + "=" + text + " is negative");
            }
            return device;
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("create: " + where + "=" + text + " is not a device number", e);
        }
    }

    /**
     * MPI_Finalize, bounded: a daemon thread halts the process (exit code 1, so the launcher ends the
     * job) if it has not returned after {@code timeout} (a peer that never reaches its finalize).
     */
    static void finalizeBounded(MpiLibrary mpi, Duration timeout, int rank) {
        Thread guard = Thread.ofPlatform().daemon().name("jnccl-mpi-finalize-guard").start(() -> {
            try {
                Thread.sleep(timeout);
            } catch (InterruptedException e) {
                return;
            }
            LOG.error("rank {}: MPI_Finalize did not return within {} ms (CommunicatorOptions.closeTimeout); halting"
                    + " this process with exit code 1", rank, Deadlines.toMillis(timeout));
            Runtime.getRuntime().halt(MpiHost.ABORT_EXIT_CODE);
        });
        try {
            mpi.finalizeMpi();
        } finally {
            guard.interrupt();
        }
    }
}
