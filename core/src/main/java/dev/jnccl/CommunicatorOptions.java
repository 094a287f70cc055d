package dev.jnccl;

import dev.jnccl.internal.OptionChecks;
import java.time.Duration;
import java.util.Objects;

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
 *                           before it aborts instead (default 30 s; same range)
 * @param watchdogTimeout    a transaction not complete after this long aborts the communicator
 *                           (default 10 min, as PyTorch's; 1 ms to 365 days); {@link Duration#ZERO}
 *                           turns the watchdog off (see {@link #withoutWatchdog()})
 * @param watchdogInterval   how often the watchdog polls (default 100 ms; 1 ms to 1 h)
 * @param flightRecorderSize how many recent transactions the flight recorder keeps (default 64;
 *                           1 to 65536)
 * @param mode               how NCCL is driven (default {@link CommunicatorMode#BLOCKING_SPLIT}: bounded
 *                           init, blocking-speed transactions); see {@link CommunicatorMode}
 */
public record CommunicatorOptions(Duration initTimeout, Duration closeTimeout, Duration watchdogTimeout,
                                  Duration watchdogInterval, int flightRecorderSize, CommunicatorMode mode) {

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
     * Checks every value; see the component descriptions.
     *
     * @throws NullPointerException     naming the option that is null
     * @throws IllegalArgumentException naming the option, its value and the allowed range
     */
    public CommunicatorOptions {
        OptionChecks.duration(NAME, "initTimeout", initTimeout, MIN_WAIT, MAX_TIMEOUT);
        OptionChecks.duration(NAME, "closeTimeout", closeTimeout, MIN_WAIT, MAX_TIMEOUT);
        Objects.requireNonNull(watchdogTimeout, NAME + ": watchdogTimeout is null (withoutWatchdog() turns it off)");
        if (!watchdogTimeout.isZero()) {
            timeout("watchdogTimeout", watchdogTimeout);
        }
        OptionChecks.duration(NAME, "watchdogInterval", watchdogInterval, MIN_WATCHDOG_INTERVAL, MAX_WATCHDOG_INTERVAL);
        OptionChecks.range(NAME, "flightRecorderSize", flightRecorderSize, 1, MAX_FLIGHT_RECORDER_SIZE);
        Objects.requireNonNull(mode, NAME + ": mode is null");
    }

    private static void timeout(String option, Duration value) {
        OptionChecks.duration(NAME, option, value, MIN_TIMEOUT, MAX_TIMEOUT);
    }

    /**
     * The defaults.
     *
     * @return 120 s init, 30 s close, the watchdog on with a 10 minute timeout (PyTorch's default),
     *         100 ms poll interval, 64 recorded transactions, {@link CommunicatorMode#BLOCKING_SPLIT}
     */
    public static CommunicatorOptions defaults() {
        return new CommunicatorOptions(Duration.ofSeconds(120), Duration.ofSeconds(30), Duration.ofMinutes(10),
                Duration.ofMillis(100), 64, CommunicatorMode.BLOCKING_SPLIT);
    }

    /** The mutable copy the {@code with*} methods change one value of; the constructor checks them all. */
    private static final class Copy {
        Duration initTimeout;
        Duration closeTimeout;
        Duration watchdogTimeout;
        Duration watchdogInterval;
        int flightRecorderSize;
        CommunicatorMode mode;
    }

    private interface Change {
        void apply(Copy copy);
    }

    private CommunicatorOptions with(Change change) {
        Copy copy = new Copy();
        copy.initTimeout = initTimeout;
        copy.closeTimeout = closeTimeout;
        copy.watchdogTimeout = watchdogTimeout;
        copy.watchdogInterval = watchdogInterval;
        copy.flightRecorderSize = flightRecorderSize;
        copy.mode = mode;
        change.apply(copy);
        return new CommunicatorOptions(copy.initTimeout, copy.closeTimeout, copy.watchdogTimeout, copy.watchdogInterval,
                copy.flightRecorderSize, copy.mode);
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
            throw new IllegalArgumentException(NAME + ": watchdogTimeout PT0S is out of range: expected 1 ms to 365 days"
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

    /** {@return whether the watchdog runs} */
    public boolean watchdogEnabled() {
        return !watchdogTimeout.isZero();
    }
}
