package dev.jnccl.internal;

import java.time.Duration;
import java.util.Objects;

/**
 * The range checks of jnccl's option records ({@code CommunicatorOptions}, {@code ThreadsOptions},
 * {@code MpiOptions}): each failure names the record, the option, the value and the allowed range,
 * when the option is set rather than when it is first used. Not API.
 */
public final class OptionChecks {
    private OptionChecks() {}

    /**
     * Checks that {@code value} is given and in {@code [min, max]}.
     *
     * @return {@code value}
     * @throws NullPointerException     naming the option when it is null
     * @throws IllegalArgumentException naming the option, the value and the range otherwise
     */
    public static Duration duration(String owner, String option, Duration value, Duration min, Duration max) {
        Objects.requireNonNull(value, () -> owner + ": " + option + " is null");
        if (value.compareTo(min) < 0 || value.compareTo(max) > 0) {
            throw new IllegalArgumentException(owner + ": " + option + " " + value + " is out of range: expected "
                    + describe(min) + " to " + describe(max));
        }
        return value;
    }

    /**
     * Checks that {@code value} is in {@code [min, max]}.
     *
     * @return {@code value}
     * @throws IllegalArgumentException naming the option, the value and the range
     */
    public static int range(String owner, String option, int value, int min, int max) {
        if (value < min || value > max) {
            throw new IllegalArgumentException(owner + ": " + option + " " + value + " is out of range: expected "
                    + min + " to " + max);
        }
        return value;
    }

    /** {@return {@code duration} in the largest whole unit among days, h, min, s, ms (or 1 ns), else as ISO-8601} */
    public static String describe(Duration duration) {
        if (duration.equals(Duration.ofNanos(1))) {
            return "1 ns";
        }
        long millis = duration.toMillis();
        if (duration.toNanosPart() % 1_000_000 != 0) {
            return duration.toString();
        }
        long[] units = {86_400_000L, 3_600_000L, 60_000L, 1000L, 1L};
        String[] names = {" days", " h", " min", " s", " ms"};
        for (int i = 0; i < units.length; i++) {
            if (millis % units[i] == 0 && millis >= units[i]) {
                return millis / units[i] + names[i];
            }
        }
        return duration.toString();
    }
}
