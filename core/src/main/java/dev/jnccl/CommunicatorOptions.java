package dev.jnccl;

import dev.jnccl.internal.OptionChecks;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.function.Consumer;

/**
 * Deadlines and diagnostics of a communicator. Immutable; start from {@link #defaults()} and
 * change what you need with the {@code with*} methods. Every value is checked when it is set (by
 * a {@code with*} method or the constructor): a null, a value out of its range or a zero or
 * negative duration gives an exception naming the option, the value and the range, so that no
 * deadline overflows or polls absurdly often later.
 *
 * @param initTimeout        how long init waits for the other ranks before aborting (default 120 s;
 *                           1 ns to 365 days)
 * @param closeTimeout       how long {@code close()} waits for pending work and ncclCommFinalize
 *                           before it aborts instead (default 30 s; same range); also how long an
 *                           abort waits for ncclCommAbort (at least 5 s) before it abandons the
 *                           communicator (see {@link Communicator#abort})
 * @param watchdogTimeout    a transaction not complete after this long aborts the communicator
 *                           (default 10 min, as PyTorch's; 1 ms to 365 days); {@link Duration#ZERO}
 *                           turns the watchdog off (see {@link #withoutWatchdog()})
 * @param watchdogInterval   how often the watchdog polls (default 100 ms; 1 ms to 1 h)
 * @param flightRecorderSize how many recent transactions the flight recorder keeps (default 64;
 *                           1 to 65536)
 * @param mode               how NCCL is driven (default {@link CommunicatorMode#BLOCKING_SPLIT}: bounded
 *                           init, blocking-speed transactions); see {@link CommunicatorMode}
 * @param minCTAs            ncclConfig_t.minCTAs: the fewest CTAs (channels) NCCL uses per collective,
 *                           1 to 64, or {@link #NCCL_DEFAULT} (default: NCCL's, 1)
 * @param maxCTAs            ncclConfig_t.maxCTAs: the most CTAs NCCL uses per collective, 1 to 64 and at
 *                           least {@code minCTAs}, or {@link #NCCL_DEFAULT} (default: NCCL's, 64); fewer
 *                           leave more SMs to compute kernels that overlap the communication
 * @param cgaClusterSize     ncclConfig_t.cgaClusterSize: the CUDA thread-block cluster size of NCCL's
 *                           kernels (sm_90 and newer), 0 (no clusters) to 8, or {@link #NCCL_DEFAULT}
 *                           (default: NCCL's, 4)
 * @param name               ncclConfig_t.commName: the communicator's name in NCCL's logs
 *                           ({@code NCCL_DEBUG=INFO}); {@code ""} (the default) for none; at most 256
 *                           characters, no NUL
 * @param consistencyChecks  whether the ranks compare every transaction's commands before NCCL runs
 *                           them (default off; the setting {@code jnccl.debug=detail} turns it on for
 *                           every communicator): see {@link #withConsistencyChecks(boolean)}
 * @param diagnosisDirectory the folder where each rank writes its diagnosis dump, or null (the default) for
 *                           the setting {@code jnccl.diagnosis.dir} (system property, else the environment
 *                           variable {@code JNCCL_DIAGNOSIS_DIR}), and no dumps when that is not set either:
 *                           see {@link #withDiagnosisDirectory(Path)}
 */
public record CommunicatorOptions(Duration initTimeout, Duration closeTimeout, Duration watchdogTimeout,
                                  Duration watchdogInterval, int flightRecorderSize, CommunicatorMode mode,
                                  int minCTAs, int maxCTAs, int cgaClusterSize, String name,
                                  boolean consistencyChecks, Path diagnosisDirectory) {

    /** The value of {@link #minCTAs}, {@link #maxCTAs} and {@link #cgaClusterSize} that leaves NCCL's default. */
    public static final int NCCL_DEFAULT = -1;
    /** NCCL's channel limit (MAXCHANNELS): it silently caps larger CTA counts, jnccl refuses them. */
    private static final int MAX_CTAS = 64;
    /** NCCL's largest CGA cluster (NCCL_MAX_CGA_CLUSTER_SIZE). */
    private static final int MAX_CGA_CLUSTER_SIZE = 8;
    /** The longest communicator name. */
    private static final int MAX_NAME_LENGTH = 256;

    /** The shortest timeout: a shorter one could not even cover one poll of the native state. */
    private static final Duration MIN_TIMEOUT = Duration.ofMillis(1);
    /** init and close: any positive wait (1 ns: "do not wait", a test's way to make every init fail at once). */
    private static final Duration MIN_WAIT = Duration.ofNanos(1);
    /** The longest timeout: a longer one is a mistake rather than a deadline. */
    private static final Duration MAX_TIMEOUT = Duration.ofDays(365);
    /** The shortest watchdog interval: polling more often would cost a core. */
    private static final Duration MIN_WATCHDOG_INTERVAL = Duration.ofMillis(1);
    /** The longest watchdog interval: a watchdog that looks less often is no watchdog. */
    private static final Duration MAX_WATCHDOG_INTERVAL = Duration.ofHours(1);
    /** The largest flight recorder: its queue is allocated at this size, and each entry may hold a CUDA event. */
    private static final int MAX_FLIGHT_RECORDER_SIZE = 65_536;
    private static final String NAME = "CommunicatorOptions";

    /**
     * The options with the default {@link CommunicatorMode#BLOCKING_SPLIT} mode.
     *
     * @param initTimeout        how long init waits for the other ranks
     * @param closeTimeout       how long close waits for pending work and finalize
     * @param watchdogTimeout    the watchdog's timeout ({@link Duration#ZERO}: no watchdog)
     * @param watchdogInterval   how often the watchdog polls
     * @param flightRecorderSize how many recent transactions the flight recorder keeps
     */
    public CommunicatorOptions(Duration initTimeout, Duration closeTimeout, Duration watchdogTimeout,
                               Duration watchdogInterval, int flightRecorderSize) {
        this(initTimeout, closeTimeout, watchdogTimeout, watchdogInterval, flightRecorderSize,
                CommunicatorMode.BLOCKING_SPLIT);
    }

    /**
     * The options with NCCL's default tuning and no name.
     *
     * @param initTimeout        how long init waits for the other ranks
     * @param closeTimeout       how long close waits for pending work and finalize
     * @param watchdogTimeout    the watchdog's timeout ({@link Duration#ZERO}: no watchdog)
     * @param watchdogInterval   how often the watchdog polls
     * @param flightRecorderSize how many recent transactions the flight recorder keeps
     * @param mode               how NCCL is driven
     */
    public CommunicatorOptions(Duration initTimeout, Duration closeTimeout, Duration watchdogTimeout,
                               Duration watchdogInterval, int flightRecorderSize, CommunicatorMode mode) {
        this(initTimeout, closeTimeout, watchdogTimeout, watchdogInterval, flightRecorderSize, mode, NCCL_DEFAULT,
                NCCL_DEFAULT, NCCL_DEFAULT, "");
    }

    /**
     * The options with the consistency checks off (unless {@code jnccl.debug=detail} turns them on).
     *
     * @param initTimeout        how long init waits for the other ranks
     * @param closeTimeout       how long close waits for pending work and finalize
     * @param watchdogTimeout    the watchdog's timeout ({@link Duration#ZERO}: no watchdog)
     * @param watchdogInterval   how often the watchdog polls
     * @param flightRecorderSize how many recent transactions the flight recorder keeps
     * @param mode               how NCCL is driven
     * @param minCTAs            the fewest CTAs per collective, or {@link #NCCL_DEFAULT}
     * @param maxCTAs            the most CTAs per collective, or {@link #NCCL_DEFAULT}
     * @param cgaClusterSize     the CGA cluster size, or {@link #NCCL_DEFAULT}
     * @param name               the communicator's name in NCCL's logs ({@code ""} for none)
     */
    public CommunicatorOptions(Duration initTimeout, Duration closeTimeout, Duration watchdogTimeout,
                               Duration watchdogInterval, int flightRecorderSize, CommunicatorMode mode, int minCTAs,
                               int maxCTAs, int cgaClusterSize, String name) {
        this(initTimeout, closeTimeout, watchdogTimeout, watchdogInterval, flightRecorderSize, mode, minCTAs, maxCTAs,
                cgaClusterSize, name, false);
    }

    /**
     * The options with the diagnosis dumps as the setting {@code jnccl.diagnosis.dir} says (off when unset).
     *
     * @param initTimeout        how long init waits for the other ranks
     * @param closeTimeout       how long close waits for pending work and finalize
     * @param watchdogTimeout    the watchdog's timeout ({@link Duration#ZERO}: no watchdog)
     * @param watchdogInterval   how often the watchdog polls
     * @param flightRecorderSize how many recent transactions the flight recorder keeps
     * @param mode               how NCCL is driven
     * @param minCTAs            the fewest CTAs per collective, or {@link #NCCL_DEFAULT}
     * @param maxCTAs            the most CTAs per collective, or {@link #NCCL_DEFAULT}
     * @param cgaClusterSize     the CGA cluster size, or {@link #NCCL_DEFAULT}
     * @param name               the communicator's name in NCCL's logs ({@code ""} for none)
     * @param consistencyChecks  whether the ranks compare every transaction's commands before NCCL runs them
     */
    public CommunicatorOptions(Duration initTimeout, Duration closeTimeout, Duration watchdogTimeout,
                               Duration watchdogInterval, int flightRecorderSize, CommunicatorMode mode, int minCTAs,
                               int maxCTAs, int cgaClusterSize, String name, boolean consistencyChecks) {
        this(initTimeout, closeTimeout, watchdogTimeout, watchdogInterval, flightRecorderSize, mode, minCTAs, maxCTAs,
                cgaClusterSize, name, consistencyChecks, null);
    }

    /**
     * Checks every value; see the component descriptions.
     *
     * @throws NullPointerException     naming the option that is null
     * @throws IllegalArgumentException naming the option, its value and the allowed range
     */
    public CommunicatorOptions {
        OptionChecks.duration(NAME, "initTimeout", initTimeout, MIN_WAIT, MAX_TIMEOUT);
        OptionChecks.duration(NAME, "closeTimeout", closeTimeout, MIN_WAIT, MAX_TIMEOUT);
        OptionChecks.given(NAME, watchdogTimeout, "watchdogTimeout is null (withoutWatchdog() turns it off)");
        if (!watchdogTimeout.isZero()) {
            OptionChecks.duration(NAME, "watchdogTimeout", watchdogTimeout, MIN_TIMEOUT, MAX_TIMEOUT);
        }
        OptionChecks.duration(NAME, "watchdogInterval", watchdogInterval, MIN_WATCHDOG_INTERVAL, MAX_WATCHDOG_INTERVAL);
        OptionChecks.range(NAME, "flightRecorderSize", flightRecorderSize, 1, MAX_FLIGHT_RECORDER_SIZE);
        OptionChecks.given(NAME, mode, "mode is null");
        ctas("minCTAs", minCTAs);
        ctas("maxCTAs", maxCTAs);
        if (minCTAs != NCCL_DEFAULT && maxCTAs != NCCL_DEFAULT && minCTAs > maxCTAs) {
            throw new IllegalArgumentException(NAME + ": minCTAs " + minCTAs + " is more than maxCTAs " + maxCTAs
                    + ": expected minCTAs <= maxCTAs");
        }
        if (cgaClusterSize != NCCL_DEFAULT) {
            OptionChecks.range(NAME, "cgaClusterSize", cgaClusterSize, 0, MAX_CGA_CLUSTER_SIZE);
        }
        OptionChecks.given(NAME, name, "name is null (\"\" for none)");
        if (name.length() > MAX_NAME_LENGTH || name.indexOf('\0') >= 0) {
            throw new IllegalArgumentException(NAME + ": name \"" + name + "\" is not valid: expected at most "
                    + MAX_NAME_LENGTH + " characters and no NUL (it has " + name.length() + ")");
        }
        if (diagnosisDirectory != null && Files.exists(diagnosisDirectory) && !Files.isDirectory(diagnosisDirectory)) {
            throw new IllegalArgumentException(NAME + ": diagnosisDirectory " + diagnosisDirectory
                    + " is not a folder: expected a folder, one that does not exist yet, or null for none");
        }
    }

    private static void ctas(String option, int value) {
        if (value != NCCL_DEFAULT && (value < 1 || value > MAX_CTAS)) {
            throw OptionChecks.outOfRange(NAME, option, value,
                    "1 to " + MAX_CTAS + ", or NCCL_DEFAULT (" + NCCL_DEFAULT + ")");
        }
    }

    /**
     * The defaults.
     *
     * @return 120 s init, 30 s close, the watchdog on with a 10 minute timeout (PyTorch's default),
     *         100 ms poll interval, 64 recorded transactions, {@link CommunicatorMode#BLOCKING_SPLIT},
     *         NCCL's tuning, no name, no consistency checks, diagnosis dumps as {@code jnccl.diagnosis.dir} says
     */
    public static CommunicatorOptions defaults() {
        return new CommunicatorOptions(Duration.ofSeconds(120), Duration.ofSeconds(30), Duration.ofMinutes(10),
                Duration.ofMillis(100), 64, CommunicatorMode.BLOCKING_SPLIT, NCCL_DEFAULT, NCCL_DEFAULT, NCCL_DEFAULT,
                "", false, null);
    }

    /**
     * A mutable copy of these options (each field starts as the value of this record's accessor of
     * the same name), which a {@code with*} method changes one value of; the constructor checks them all.
     */
    private final class Copy {
        Duration initTimeout = initTimeout();
        Duration closeTimeout = closeTimeout();
        Duration watchdogTimeout = watchdogTimeout();
        Duration watchdogInterval = watchdogInterval();
        int flightRecorderSize = flightRecorderSize();
        CommunicatorMode mode = mode();
        int minCTAs = minCTAs();
        int maxCTAs = maxCTAs();
        int cgaClusterSize = cgaClusterSize();
        String name = name();
        boolean consistencyChecks = consistencyChecks();
        Path diagnosisDirectory = diagnosisDirectory();
    }

    private CommunicatorOptions with(Consumer<Copy> change) {
        Copy copy = new Copy();
        change.accept(copy);
        return new CommunicatorOptions(copy.initTimeout, copy.closeTimeout, copy.watchdogTimeout, copy.watchdogInterval,
                copy.flightRecorderSize, copy.mode, copy.minCTAs, copy.maxCTAs, copy.cgaClusterSize, copy.name,
                copy.consistencyChecks, copy.diagnosisDirectory);
    }

    /**
     * These options with another init timeout.
     *
     * @param timeout how long init waits for the other ranks (1 ns to 365 days)
     * @return a copy with {@code initTimeout} replaced
     */
    public CommunicatorOptions withInitTimeout(Duration timeout) {
        return with(c -> c.initTimeout = timeout);
    }

    /**
     * These options with another close timeout.
     *
     * @param timeout how long {@code close()} waits before it aborts instead (1 ns to 365 days)
     * @return a copy with {@code closeTimeout} replaced
     */
    public CommunicatorOptions withCloseTimeout(Duration timeout) {
        return with(c -> c.closeTimeout = timeout);
    }

    /**
     * The watchdog on with another timeout: a transaction not complete after {@code timeout}
     * aborts the communicator. {@link Duration#ZERO} is refused here: turn the watchdog off with
     * {@link #withoutWatchdog()}.
     *
     * @param timeout the watchdog timeout (1 ms to 365 days)
     * @return a copy with {@code watchdogTimeout} replaced
     */
    public CommunicatorOptions withWatchdog(Duration timeout) {
        if (Duration.ZERO.equals(timeout)) {
            throw OptionChecks.outOfRange(NAME, "watchdogTimeout", timeout, OptionChecks.span(MIN_TIMEOUT, MAX_TIMEOUT)
                    + " (withoutWatchdog() turns the watchdog off)");
        }
        return with(c -> c.watchdogTimeout = timeout);
    }

    /**
     * The watchdog off (it is on by default): a hung collective then hangs until {@code abort()}
     * or {@code close()}.
     *
     * @return a copy with {@code watchdogTimeout} {@link Duration#ZERO}
     */
    public CommunicatorOptions withoutWatchdog() {
        return with(c -> c.watchdogTimeout = Duration.ZERO);
    }

    /**
     * These options with another watchdog poll interval.
     *
     * @param interval how often the watchdog polls (1 ms to 1 h)
     * @return a copy with {@code watchdogInterval} replaced
     */
    public CommunicatorOptions withWatchdogInterval(Duration interval) {
        return with(c -> c.watchdogInterval = interval);
    }

    /**
     * These options with another flight recorder size.
     *
     * @param size how many recent transactions to keep (1 to 65536)
     * @return a copy with {@code flightRecorderSize} replaced
     */
    public CommunicatorOptions withFlightRecorderSize(int size) {
        return with(c -> c.flightRecorderSize = size);
    }

    /**
     * The same options with another communicator mode.
     *
     * @param mode how NCCL is driven (see {@link CommunicatorMode} for what each costs and bounds)
     * @return a copy with {@code mode} replaced
     */
    public CommunicatorOptions withMode(CommunicatorMode mode) {
        return with(c -> c.mode = mode);
    }

    /**
     * These options with other CTA bounds (ncclConfig_t.minCTAs / maxCTAs, applied at init and to
     * split communicators): NCCL uses between {@code min} and {@code max} CTAs (channels) per
     * collective. Fewer leave more SMs to compute kernels that overlap the communication.
     *
     * @param min the fewest CTAs, 1 to 64, or {@link #NCCL_DEFAULT}
     * @param max the most CTAs, 1 to 64 and at least {@code min}, or {@link #NCCL_DEFAULT}
     * @return a copy with {@code minCTAs} and {@code maxCTAs} replaced
     */
    public CommunicatorOptions withCTAs(int min, int max) {
        return with(c -> {
            c.minCTAs = min;
            c.maxCTAs = max;
        });
    }

    /**
     * These options with another CGA cluster size (ncclConfig_t.cgaClusterSize; sm_90 and newer).
     *
     * @param size 0 (no clusters) to 8, or {@link #NCCL_DEFAULT}
     * @return a copy with {@code cgaClusterSize} replaced
     */
    public CommunicatorOptions withCgaClusterSize(int size) {
        return with(c -> c.cgaClusterSize = size);
    }

    /**
     * These options with another communicator name (ncclConfig_t.commName), which NCCL shows in its
     * logs ({@code NCCL_DEBUG=INFO}) so that the communicators of one job can be told apart. Split
     * communicators get the same name.
     *
     * @param name at most 256 characters, no NUL; {@code ""} for none
     * @return a copy with {@code name} replaced
     */
    public CommunicatorOptions withName(String name) {
        return with(c -> c.name = name);
    }

    /**
     * These options with the consistency checks on or off (PyTorch's
     * {@code TORCH_DISTRIBUTED_DEBUG=DETAIL} for jnccl): when on, before each transaction, convenience
     * operation and graph replay the ranks exchange a fingerprint of its commands over the launcher's
     * host channel, bounded by the watchdog's timeout as other host-side waits are, and compare them:
     * collectives in command order by kind, count, element type, reduction (a scaled sum's factor
     * too) and root; each rank's sends to a peer, in order, against that peer's receives from it by
     * count and type. A difference, which real NCCL would run silently (wrong results, or a hang),
     * aborts every rank before NCCL runs anything of it, with the same verdict on every rank naming
     * the ranks that differ, the field and both values. A transaction captured into a CUDA graph is
     * checked when it is captured, and each replay through {@link Communicator#launch} again (by the
     * commands it replays; {@code CudaGraph.launch} replays unchecked, as it replays untracked).
     *
     * <p>It costs one host all-gather per transaction (a synchronization of all ranks: ranks no
     * longer run ahead of each other). The setting {@code jnccl.debug=detail} (system property,
     * else the environment variable {@code JNCCL_DEBUG}) turns it on for every communicator without
     * changing code; it must be on for every rank alike. It needs a host channel between the ranks:
     * {@link Communicator#initRank} (and Spark barrier mode), whose host-side calls run over the
     * communicator's own NCCL, skip it with a WARN line at creation; a communicator of world size 1
     * has nothing to compare.
     *
     * @param enabled whether to check
     * @return a copy with {@code consistencyChecks} replaced
     */
    public CommunicatorOptions withConsistencyChecks(boolean enabled) {
        return with(c -> c.consistencyChecks = enabled);
    }

    /**
     * These options with another folder for the diagnosis dumps (the {@code fr_trace} role of PyTorch's
     * flight recorder): each rank writes {@code jnccl-rank-R-of-W.json} there (atomically: a temporary
     * file, then a move) when its watchdog first sees a transaction pending for half its timeout, and
     * again when its communicator is aborted: its {@link RankSummary}, its flight recorder's recent
     * transactions and the verdict it knows. A job whose processes died can then be diagnosed offline:
     * {@code scripts/diagnose.sh FOLDER} merges the files and prints the same verdict as a live
     * diagnosis, naming the ranks that left no file. Communicators {@linkplain Communicator#split split}
     * from another write none (their files would take their parent's names). The folder is made when
     * the first file is written; a file that cannot be written is a WARN line, never a failure.
     *
     * @param directory the folder, or null for the setting {@code jnccl.diagnosis.dir} (system property,
     *                  else the environment variable {@code JNCCL_DIAGNOSIS_DIR}; no dumps when unset)
     * @return a copy with {@code diagnosisDirectory} replaced
     * @throws IllegalArgumentException when {@code directory} exists and is not a folder
     */
    public CommunicatorOptions withDiagnosisDirectory(Path directory) {
        return with(c -> c.diagnosisDirectory = directory);
    }

    /** {@return whether the watchdog runs} */
    public boolean watchdogEnabled() {
        return !watchdogTimeout.isZero();
    }
}
