package dev.jnccl.internal;

import java.time.Duration;

/**
 * Durations as {@link System#nanoTime()} deadlines, without overflow. {@link Duration#toNanos()}
 * throws for durations past about 292 years and {@code now + nanos} can wrap; here a duration is
 * clamped to {@link #MAX_NANOS} first, so a deadline compared as {@code now - deadline > 0} stays
 * right for any option value: a huge timeout means "practically never", not an exception at the
 * moment of use. Not API.
 */
public final class Deadlines {
    /**
     * The longest wait a deadline stands for (about 146 years): half of the range in which
     * {@code now - deadline} comparisons of nanoTime values are exact.
     */
    public static final long MAX_NANOS = Long.MAX_VALUE / 2;
    private static final long MAX_SECONDS = MAX_NANOS / 1_000_000_000L;

    private Deadlines() {}

    /** {@return {@code duration} in nanoseconds, 0 for negative, clamped to {@link #MAX_NANOS}} */
    public static long toNanos(Duration duration) {
        if (duration.isNegative()) {
            return 0;
        }
        if (duration.getSeconds() >= MAX_SECONDS) {
            return MAX_NANOS;
        }
        return duration.getSeconds() * 1_000_000_000L + duration.getNano();
    }

    /** {@return {@code duration} in milliseconds (rounded down), 0 for negative, clamped as {@link #toNanos}} */
    public static long toMillis(Duration duration) {
        return toNanos(duration) / 1_000_000L;
    }

    /** {@return the nanoTime deadline {@code timeout} after {@code now}; compare it with {@link #passed}} */
    public static long deadline(long now, Duration timeout) {
        return now + toNanos(timeout); // may wrap: passed() compares by difference, exact within MAX_NANOS
    }

    /**
     * {@return the nanoTime deadline {@code timeoutNanos} after {@code now}, the wait clamped to
     * [0, {@link #MAX_NANOS}] as {@link #toNanos} clamps a duration ({@link Long#MAX_VALUE}, the
     * host-side waits' "no limit", becomes practically never)}
     */
    public static long deadline(long now, long timeoutNanos) {
        return now + Math.clamp(timeoutNanos, 0, MAX_NANOS);
    }

    /** {@return the nanoTime deadline {@code timeout} from now} */
    public static long deadline(Duration timeout) {
        return deadline(System.nanoTime(), timeout);
    }

    /** {@return whether {@code now} is past {@code deadline}} */
    public static boolean passed(long deadline, long now) {
        return now - deadline > 0;
    }

    /** {@return whether the current nanoTime is past {@code deadline}} */
    public static boolean passed(long deadline) {
        return passed(deadline, System.nanoTime());
    }

    /** {@return the nanoseconds left until {@code deadline}, 0 when it has passed} */
    public static long remainingNanos(long deadline) {
        return Math.max(0, deadline - System.nanoTime());
    }
}
