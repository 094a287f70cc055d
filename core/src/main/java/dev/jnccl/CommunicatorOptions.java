package dev.jnccl;

import java.time.Duration;
import java.util.Objects;

/**
 * Deadlines and diagnostics of a communicator. Immutable; start from {@link #defaults()} and
 * change what you need with the {@code with*} methods.
 *
 * @param initTimeout        how long init waits for the other ranks before aborting (default 120 s)
 * @param closeTimeout       how long {@code close()} waits for pending work and ncclCommFinalize
 *                           before it aborts instead (default 30 s)
 * @param watchdogTimeout    {@link Duration#ZERO} (default) disables the watchdog; otherwise a
 *                           transaction not complete after this long aborts the communicator
 * @param watchdogInterval   how often the watchdog polls (default 100 ms)
 * @param flightRecorderSize how many recent transactions the flight recorder keeps (default 64)
 * @param mode               how NCCL is driven (default {@link CommunicatorMode#BLOCKING_SPLIT}: bounded
 *                           init, blocking-speed transactions); see {@link CommunicatorMode}
 */
public record CommunicatorOptions(Duration initTimeout, Duration closeTimeout, Duration watchdogTimeout,
                                  Duration watchdogInterval, int flightRecorderSize, CommunicatorMode mode) {

    /** The options with the default {@link CommunicatorMode#BLOCKING_SPLIT} mode. */
    public CommunicatorOptions(Duration initTimeout, Duration closeTimeout, Duration watchdogTimeout,
                               Duration watchdogInterval, int flightRecorderSize) {
        this(initTimeout, closeTimeout, watchdogTimeout, watchdogInterval, flightRecorderSize,
                CommunicatorMode.BLOCKING_SPLIT);
    }

    /** Checks every value; see the component descriptions. */
    public CommunicatorOptions {
        Objects.requireNonNull(mode, "CommunicatorOptions: mode is null");
        requirePositive("initTimeout", initTimeout);
        requirePositive("closeTimeout", closeTimeout);
        Objects.requireNonNull(watchdogTimeout, "CommunicatorOptions: watchdogTimeout is null (use Duration.ZERO to disable)");
        if (watchdogTimeout.isNegative()) {
            throw new IllegalArgumentException("CommunicatorOptions: watchdogTimeout " + watchdogTimeout + " is negative");
        }
        requirePositive("watchdogInterval", watchdogInterval);
        if (flightRecorderSize < 1) {
            throw new IllegalArgumentException("CommunicatorOptions: flightRecorderSize " + flightRecorderSize
                    + " must be at least 1");
        }
    }

    private static void requirePositive(String name, Duration value) {
        Objects.requireNonNull(value, "CommunicatorOptions: " + name + " is null");
        if (value.isNegative() || value.isZero()) {
            throw new IllegalArgumentException("CommunicatorOptions: " + name + " " + value + " must be positive");
        }
    }

    /**
     * 120 s init, 30 s close, no watchdog, 100 ms poll interval, 64 recorded transactions,
     * {@link CommunicatorMode#BLOCKING_SPLIT}.
     */
    public static CommunicatorOptions defaults() {
        return new CommunicatorOptions(Duration.ofSeconds(120), Duration.ofSeconds(30), Duration.ZERO,
                Duration.ofMillis(100), 64, CommunicatorMode.BLOCKING_SPLIT);
    }

    public CommunicatorOptions withInitTimeout(Duration timeout) {
        return new CommunicatorOptions(timeout, closeTimeout, watchdogTimeout, watchdogInterval, flightRecorderSize, mode);
    }

    public CommunicatorOptions withCloseTimeout(Duration timeout) {
        return new CommunicatorOptions(initTimeout, timeout, watchdogTimeout, watchdogInterval, flightRecorderSize, mode);
    }

    /** Enables the watchdog: a transaction not complete after {@code timeout} aborts the communicator. */
    public CommunicatorOptions withWatchdog(Duration timeout) {
        return new CommunicatorOptions(initTimeout, closeTimeout, timeout, watchdogInterval, flightRecorderSize, mode);
    }

    public CommunicatorOptions withWatchdogInterval(Duration interval) {
        return new CommunicatorOptions(initTimeout, closeTimeout, watchdogTimeout, interval, flightRecorderSize, mode);
    }

    public CommunicatorOptions withFlightRecorderSize(int size) {
        return new CommunicatorOptions(initTimeout, closeTimeout, watchdogTimeout, watchdogInterval, size, mode);
    }

    /** The same options with communicator {@code mode} (see {@link CommunicatorMode} for what each costs and bounds). */
    public CommunicatorOptions withMode(CommunicatorMode mode) {
        return new CommunicatorOptions(initTimeout, closeTimeout, watchdogTimeout, watchdogInterval, flightRecorderSize,
                mode);
    }

    /** Whether the watchdog runs. */
    public boolean watchdogEnabled() {
        return !watchdogTimeout.isZero();
    }
}
