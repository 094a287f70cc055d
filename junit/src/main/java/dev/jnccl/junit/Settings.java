package dev.jnccl.junit;

import dev.jnccl.threads.ThreadsOptions;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.Set;
import java.util.function.Supplier;
import org.junit.jupiter.api.extension.ExtensionConfigurationException;

/**
 * A test method's {@link MultiRankTest} and {@link InjectFault}, checked: every value out of range is
 * refused here, before anything native, with the annotation, the value and the allowed range.
 */
record Settings(String test, List<Integer> worlds, Duration timeout, Placement placement, ThreadsOptions options,
                Optional<InjectFault> fault) {
    static final int MAX_WORLD = 1024;
    static final long MAX_TIMEOUT_SECONDS = 86_400;
    static final long MAX_LAG_MICROS = 60_000_000L; // the emulation's upper bound of JNCCL_HOST_DELAY_US

    static Settings of(Method method) {
        String test = method.getDeclaringClass().getSimpleName() + "." + method.getName() + "()";
        MultiRankTest annotation = method.getAnnotation(MultiRankTest.class);
        List<Integer> worlds = worlds(test, annotation.worlds());
        long seconds = annotation.timeoutSeconds();
        if (seconds < 1 || seconds > MAX_TIMEOUT_SECONDS) {
            throw refused(test, "timeoutSeconds " + seconds + " is outside the allowed range [1, "
                    + MAX_TIMEOUT_SECONDS + "]");
        }
        Optional<InjectFault> fault = Optional.ofNullable(method.getAnnotation(InjectFault.class));
        fault.ifPresent(f -> checkFault(test, f, worlds));
        return new Settings(test, worlds, Duration.ofSeconds(seconds), placement(test, annotation.placement()),
                options(test, annotation.options()), fault);
    }

    private static List<Integer> worlds(String test, int[] worlds) {
        if (worlds.length == 0) {
            throw refused(test, "worlds is empty; give one or more world sizes in [1, " + MAX_WORLD + "]");
        }
        Set<Integer> seen = new HashSet<>();
        for (int world : worlds) {
            if (world < 1 || world > MAX_WORLD) {
                throw refused(test, "worlds " + Arrays.toString(worlds) + " contains " + world
                        + ", outside the allowed range [1, " + MAX_WORLD + "]");
            }
            if (!seen.add(world)) {
                throw refused(test, "worlds " + Arrays.toString(worlds) + " repeats " + world);
            }
        }
        return Arrays.stream(worlds).boxed().toList();
    }

    private static void checkFault(String test, InjectFault fault, List<Integer> worlds) {
        int smallest = worlds.stream().mapToInt(Integer::intValue).min().orElseThrow();
        String what = "@InjectFault(kind = " + fault.kind() + ") on " + test + ": ";
        if (fault.rank() < 0 || fault.rank() >= smallest) {
            throw new ExtensionConfigurationException(what + "rank " + fault.rank() + " is outside world " + smallest
                    + " of worlds " + worlds + "; the allowed range is [0, " + (smallest - 1) + "]");
        }
        if (fault.at() < 1) {
            throw new ExtensionConfigurationException(what + "at " + fault.at()
                    + " is outside the allowed range [1, " + Integer.MAX_VALUE + "] (operations count from 1)");
        }
        boolean lag = fault.kind() == InjectFault.Kind.LAG;
        if (lag && (fault.lagMicros() < 1 || fault.lagMicros() > MAX_LAG_MICROS)) {
            throw new ExtensionConfigurationException(what + "lagMicros " + fault.lagMicros()
                    + " is outside the allowed range [1, " + MAX_LAG_MICROS + "]");
        }
        if (lag && fault.at() != 1) {
            throw new ExtensionConfigurationException(what + "at " + fault.at()
                    + " is not allowed: a lag delays every operation of the rank (leave at = 1)");
        }
        if (!lag && fault.lagMicros() != 0) {
            throw new ExtensionConfigurationException(what + "lagMicros " + fault.lagMicros()
                    + " is only for kind = LAG (leave it 0)");
        }
    }

    /** {@link Placement#AUTO} resolved by the run's {@value Placement#PROPERTY}, else {@link Placement#GPUS}. */
    private static Placement placement(String test, Placement placement) {
        if (placement != Placement.AUTO) {
            return placement;
        }
        String value = System.getProperty(Placement.PROPERTY);
        if (value == null || value.isBlank()) {
            return Placement.GPUS;
        }
        return switch (value.trim().toLowerCase(Locale.ROOT)) {
            case "gpus" -> Placement.GPUS;
            case "shared" -> Placement.SHARED;
            case "host" -> Placement.HOST;
            default -> throw new ExtensionConfigurationException("system property " + Placement.PROPERTY + " is '"
                    + value + "' (for " + test + "); expected one of gpus, shared, host");
        };
    }

    private static ThreadsOptions options(String test, Class<? extends Supplier<ThreadsOptions>> type) {
        ThreadsOptions options;
        try {
            var constructor = type.getDeclaredConstructor();
            constructor.setAccessible(true);
            options = constructor.newInstance().get();
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw refused(test, "options " + type.getName() + " could not supply the options (it needs a"
                    + " no-argument constructor and a get() that returns ThreadsOptions): " + e, e);
        }
        if (options == null) {
            throw refused(test, "options " + type.getName() + ".get() returned null");
        }
        return options;
    }

    private static ExtensionConfigurationException refused(String test, String why) {
        return refused(test, why, null);
    }

    private static ExtensionConfigurationException refused(String test, String why, Throwable cause) {
        return new ExtensionConfigurationException("@MultiRankTest on " + test + ": " + why, cause);
    }
}
