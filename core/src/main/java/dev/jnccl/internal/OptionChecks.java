package dev.jnccl.internal;

import java.time.Duration;
import java.util.List;
import java.util.Locale;
import java.util.function.UnaryOperator;

/**
 * The one place where jnccl's options ({@code CommunicatorOptions}, {@code ThreadsOptions},
 * {@code MpiOptions}) check a value when it is set rather than when it is first used: each failure
 * names the options type, the option, the value and what is expected. The checks return the value;
 * the failures ({@link #missing}, {@link #outOfRange}, {@link #negative}) are for an option whose
 * message says more than its name (a hint, a rank, a special value). Not API.
 */
public final class OptionChecks {
    private OptionChecks() {}

    /**
     * Checks that {@code value} is given.
     *
     * @param owner   the options type, as messages name it
     * @param value   the value
     * @param missing what the message says after the owner, e.g. {@code "mode is null"}
     * @return {@code value}
     * @throws NullPointerException with {@link #missing}'s message when it is null
     */
    public static <T> T given(String owner, T value, String missing) {
        if (value == null) {
            throw missing(owner, missing);
        }
        return value;
    }

    /**
     * Checks that {@code value} is given and in {@code [min, max]}.
     *
     * @return {@code value}
     * @throws NullPointerException     naming the option when it is null
     * @throws IllegalArgumentException naming the option, the value and the range otherwise
     */
    public static Duration duration(String owner, String option, Duration value, Duration min, Duration max) {
        if (value == null) {
            throw missing(owner, option + " is null");
        }
        if (value.compareTo(min) < 0 || value.compareTo(max) > 0) {
            throw outOfRange(owner, option, value, span(min, max));
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
            throw outOfRange(owner, option, value, min + " to " + max);
        }
        return value;
    }

    /**
     * The value of a process-wide setting: the system property {@code property}, or, when that is
     * unset or blank, the environment variable {@code variable}; trimmed and lower-cased, so that
     * any case is taken.
     *
     * @param property the system property, which wins
     * @param variable the environment variable
     * @param allowed  the values taken, lower case
     * @return the value, or null when neither is set (or both are blank)
     * @throws IllegalArgumentException naming the property or variable, the value and the values taken
     */
    public static String setting(String property, String variable, List<String> allowed) {
        return setting(property, variable, allowed, System::getProperty, System::getenv);
    }

    /** {@link #setting(String, String, List)} with the lookups given (tests pass their own). */
    public static String setting(String property, String variable, List<String> allowed,
                                 UnaryOperator<String> properties, UnaryOperator<String> environment) {
        String value = properties.apply(property);
        String source = property + " (system property)";
        if (value == null || value.isBlank()) {
            value = environment.apply(variable);
            source = variable + " (environment variable)";
        }
        if (value == null || value.isBlank()) {
            return null;
        }
        String normal = value.trim().toLowerCase(Locale.ROOT);
        if (!allowed.contains(normal)) {
            throw new IllegalArgumentException(source + " is \"" + value + "\": expected "
                    + String.join(" or ", allowed) + " (any case), or unset");
        }
        return normal;
    }

    /** {@return the failure of a null value: {@code "owner: missing"}} */
    public static NullPointerException missing(String owner, String missing) {
        return new NullPointerException(owner + ": " + missing);
    }

    /**
     * {@return the failure of a value outside what {@code option} takes: {@code "owner: option value is out
     * of range: expected expected"}}
     *
     * @param expected the values taken, e.g. {@code "1 to 64, or NCCL_DEFAULT (-1)"}
     */
    public static IllegalArgumentException outOfRange(String owner, String option, Object value, String expected) {
        return new IllegalArgumentException(owner + ": " + option + " " + value + " is out of range: expected "
                + expected);
    }

    /**
     * {@return the failure of a value below 0: {@code "owner: subject is negative: expected 0 or more"}}
     *
     * @param subject the option and its value as the message names them, e.g. {@code "device -3 of rank 0"}
     */
    public static IllegalArgumentException negative(String owner, String subject) {
        return new IllegalArgumentException(owner + ": " + subject + " is negative: expected 0 or more");
    }

    /** {@return {@code "min to max"}, each in its largest whole unit, as the range failures write them} */
    public static String span(Duration min, Duration max) {
        return describe(min) + " to " + describe(max);
    }

    /** {@return {@code duration} in the largest whole unit among days, h, min, s, ms (or 1 ns), else as ISO-8601} */
    private static String describe(Duration duration) {
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
