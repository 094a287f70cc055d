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
     * The defaults.
     *
     * @return 120 s init, 30 s close, no watchdog, 100 ms poll interval, 64 recorded transactions,
     *         {@link CommunicatorMode#BLOCKING_SPLIT}
     */
    public static CommunicatorOptions defaults() {
        return new CommunicatorOptions(Duration.ofSeconds(120), Duration.ofSeconds(30), Duration.ZERO,
                Duration.ofMillis(100), 64, CommunicatorMode.BLOCKING_SPLIT);
    }

    /**
     * These options with another init timeout.
     *
     * @param timeout how long init waits for the other ranks (positive)
     * @return a copy with {@code initTimeout} replaced
     */
    public CommunicatorOptions withInitTimeout(Duration timeout) {
        return new CommunicatorOptions(timeout, closeTimeout, watchdogTimeout, watchdogInterval, flightRecorderSize, mode);
    }

    /**
     * These options with another close timeout.
     *
     * @param timeout how long {@code close()} waits before it aborts instead (positive)
     * @return a copy with {@code closeTimeout} replaced
     */
    public CommunicatorOptions withCloseTimeout(Duration timeout) {
        return new CommunicatorOptions(initTimeout, timeout, watchdogTimeout, watchdogInterval, flightRecorderSize, mode);
    }

    /**
     * Enables the watchdog: a transaction not complete after {@code timeout} aborts the communicator.
     *
     * @param timeout the watchdog timeout ({@link Duration#ZERO} disables it)
     * @return a copy with {@code watchdogTimeout} replaced
     */
    public CommunicatorOptions withWatchdog(Duration timeout) {
        return new CommunicatorOptions(initTimeout, closeTimeout, timeout, watchdogInterval, flightRecorderSize, mode);
    }

    /**
     * These options with another watchdog poll interval.
     *
     * @param interval how often the watchdog polls (positive)
     * @return a copy with {@code watchdogInterval} replaced
     */
    public CommunicatorOptions withWatchdogInterval(Duration interval) {
        return new CommunicatorOptions(initTimeout, closeTimeout, watchdogTimeout, interval, flightRecorderSize, mode);
    }

    /**
     * These options with another flight recorder size.
     *
     * @param size how many recent transactions to keep (at least 1)
     * @return a copy with {@code flightRecorderSize} replaced
     */
    public CommunicatorOptions withFlightRecorderSize(int size) {
        return new CommunicatorOptions(initTimeout, closeTimeout, watchdogTimeout, watchdogInterval, size, mode);
    }

    /**
     * The same options with another communicator mode.
     *
     * @param mode how NCCL is driven (see {@link CommunicatorMode} for what each costs and bounds)
     * @return a copy with {@code mode} replaced
     */
    public CommunicatorOptions withMode(CommunicatorMode mode) {
        return new CommunicatorOptions(initTimeout, closeTimeout, watchdogTimeout, watchdogInterval, flightRecorderSize,
                mode);
    }

    /** {@return whether the watchdog runs} */
    public boolean watchdogEnabled() {
        return !watchdogTimeout.isZero();
    }
}
