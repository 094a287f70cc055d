package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.internal.Deadlines;
import dev.jnccl.spi.HostSide;
import java.time.Duration;
import java.util.function.Function;
import org.junit.jupiter.api.Test;

/**
 * {@link CommunicatorOptions} refuses, when set, every value that would overflow or misbehave
 * later (a timeout past Duration.toNanos's range, a 1 ns watchdog interval, nulls), with a message
 * naming the option, the value and the range; and {@link Deadlines} turns any duration into a
 * nanoTime deadline without overflow.
 */
class OptionsTest {
    private static final CommunicatorOptions DEFAULTS = CommunicatorOptions.defaults();
    /** Far past Duration.toNanos's range (about 292 years): toNanos throws ArithmeticException on it. */
    private static final Duration HUGE = Duration.ofSeconds(Long.MAX_VALUE / 4);

    @Test
    void defaultsRunTheWatchdogWithTenMinutes() {
        assertTrue(DEFAULTS.watchdogEnabled());
        assertEquals(Duration.ofMinutes(10), DEFAULTS.watchdogTimeout());
        assertEquals(Duration.ofSeconds(120), DEFAULTS.initTimeout());
        assertEquals(Duration.ofSeconds(30), DEFAULTS.closeTimeout());
        assertEquals(Duration.ofMillis(100), DEFAULTS.watchdogInterval());
        assertEquals(64, DEFAULTS.flightRecorderSize());
        CommunicatorOptions off = DEFAULTS.withoutWatchdog();
        assertFalse(off.watchdogEnabled());
        assertEquals(Duration.ZERO, off.watchdogTimeout());
        assertEquals(DEFAULTS.withWatchdog(Duration.ofSeconds(3)).watchdogTimeout(), Duration.ofSeconds(3));
        assertTrue(off.withWatchdog(Duration.ofSeconds(3)).watchdogEnabled());
        // The constructor still takes ZERO as "off", so options built field by field keep working.
        assertFalse(new CommunicatorOptions(Duration.ofSeconds(1), Duration.ofSeconds(1), Duration.ZERO,
                Duration.ofMillis(100), 1).watchdogEnabled());
    }

    @Test
    void withersRefuseOutOfRangeValuesNamingOptionValueAndRange() {
        String waits = " is out of range: expected 1 ns to 365 days";
        String timeouts = " is out of range: expected 1 ms to 365 days";
        expect("initTimeout PT0S" + waits, d -> d.withInitTimeout(Duration.ZERO));
        expect("initTimeout PT-1S" + waits, d -> d.withInitTimeout(Duration.ofSeconds(-1)));
        expect("initTimeout " + HUGE + waits, d -> d.withInitTimeout(HUGE));
        expect("closeTimeout " + HUGE + waits, d -> d.withCloseTimeout(HUGE));
        expect("closeTimeout PT8761H" + waits, d -> d.withCloseTimeout(Duration.ofHours(365 * 24 + 1)));
        expect("watchdogTimeout PT0.000999S" + timeouts, d -> d.withWatchdog(Duration.ofNanos(999_000)));
        expect("watchdogTimeout " + HUGE + timeouts, d -> d.withWatchdog(HUGE));
        expect("watchdogTimeout PT-0.001S" + timeouts, d -> d.withWatchdog(Duration.ofMillis(-1)));
        expect("watchdogTimeout PT0S" + timeouts + " (withoutWatchdog() turns the watchdog off)",
                d -> d.withWatchdog(Duration.ZERO));
        expect("watchdogInterval PT0.000000001S is out of range: expected 1 ms to 1 h",
                d -> d.withWatchdogInterval(Duration.ofNanos(1)));
        expect("watchdogInterval PT1H0.001S is out of range: expected 1 ms to 1 h",
                d -> d.withWatchdogInterval(Duration.ofHours(1).plusMillis(1)));
        expect("flightRecorderSize 0 is out of range: expected 1 to 65536", d -> d.withFlightRecorderSize(0));
        expect("flightRecorderSize 65537 is out of range: expected 1 to 65536", d -> d.withFlightRecorderSize(65537));
        expect("flightRecorderSize -5 is out of range: expected 1 to 65536", d -> d.withFlightRecorderSize(-5));
    }

    @Test
    void bothEndsOfEachRangeAreAccepted() {
        CommunicatorOptions low = DEFAULTS.withInitTimeout(Duration.ofMillis(1)).withCloseTimeout(Duration.ofMillis(1))
                .withWatchdog(Duration.ofMillis(1)).withWatchdogInterval(Duration.ofMillis(1)).withFlightRecorderSize(1);
        assertEquals(new CommunicatorOptions(Duration.ofMillis(1), Duration.ofMillis(1), Duration.ofMillis(1),
                Duration.ofMillis(1), 1, CommunicatorMode.BLOCKING_SPLIT), low);
        Duration year = Duration.ofDays(365);
        CommunicatorOptions high = DEFAULTS.withInitTimeout(year).withCloseTimeout(year).withWatchdog(year)
                .withWatchdogInterval(Duration.ofHours(1)).withFlightRecorderSize(65536)
                .withMode(CommunicatorMode.NON_BLOCKING);
        assertEquals(year, high.initTimeout());
        assertEquals(year, high.closeTimeout());
        assertEquals(year, high.watchdogTimeout());
        assertEquals(Duration.ofHours(1), high.watchdogInterval());
        assertEquals(65536, high.flightRecorderSize());
        assertEquals(CommunicatorMode.NON_BLOCKING, high.mode());
    }

    @Test
    void nullsAreRefusedNamingTheOption() {
        assertEquals("CommunicatorOptions: initTimeout is null",
                assertThrows(NullPointerException.class, () -> DEFAULTS.withInitTimeout(null)).getMessage());
        assertEquals("CommunicatorOptions: closeTimeout is null",
                assertThrows(NullPointerException.class, () -> DEFAULTS.withCloseTimeout(null)).getMessage());
        assertEquals("CommunicatorOptions: watchdogTimeout is null (withoutWatchdog() turns it off)",
                assertThrows(NullPointerException.class, () -> DEFAULTS.withWatchdog(null)).getMessage());
        assertEquals("CommunicatorOptions: watchdogInterval is null",
                assertThrows(NullPointerException.class, () -> DEFAULTS.withWatchdogInterval(null)).getMessage());
        assertEquals("CommunicatorOptions: mode is null",
                assertThrows(NullPointerException.class, () -> DEFAULTS.withMode(null)).getMessage());
    }

    @Test
    void theConstructorChecksLikeTheWithers() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> new CommunicatorOptions(Duration.ofSeconds(1), HUGE, Duration.ZERO, Duration.ofMillis(100), 8));
        assertEquals("CommunicatorOptions: closeTimeout " + HUGE + " is out of range: expected 1 ns to 365 days",
                e.getMessage());
        assertEquals("CommunicatorOptions: watchdogInterval PT0.000000001S is out of range: expected 1 ms to 1 h",
                assertThrows(IllegalArgumentException.class, () -> new CommunicatorOptions(Duration.ofSeconds(1),
                        Duration.ofSeconds(1), Duration.ZERO, Duration.ofNanos(1), 8)).getMessage());
    }

    @Test
    void deadlinesSaturateInsteadOfOverflowing() {
        Duration[] durations = {HUGE, Duration.ofSeconds(Long.MAX_VALUE, 999_999_999), Duration.ofDays(365 * 300)};
        for (Duration duration : durations) {
            assertThrows(ArithmeticException.class, duration::toNanos, "the case must overflow toNanos: " + duration);
            assertEquals(Deadlines.MAX_NANOS, Deadlines.toNanos(duration));
            assertEquals(Deadlines.MAX_NANOS / 1_000_000, Deadlines.toMillis(duration));
            for (long now : new long[] {0, Long.MAX_VALUE - 5, Long.MIN_VALUE + 5, -1}) {
                long deadline = Deadlines.deadline(now, duration);
                assertFalse(Deadlines.passed(deadline, now), "passed at once from " + now);
                assertFalse(Deadlines.passed(deadline, now + 365L * 24 * 3600 * 1_000_000_000L),
                        "passed within a year from " + now);
            }
        }
        assertEquals(1_500_000_001L, Deadlines.toNanos(Duration.ofSeconds(1, 500_000_001)));
        assertEquals(0, Deadlines.toNanos(Duration.ofSeconds(-3)));
        long now = Long.MAX_VALUE - 10; // nanoTime may sit anywhere, near the wrap too
        long deadline = Deadlines.deadline(now, Duration.ofNanos(100));
        assertFalse(Deadlines.passed(deadline, now + 100));
        assertTrue(Deadlines.passed(deadline, now + 101));
        assertTrue(Deadlines.remainingNanos(Deadlines.deadline(Duration.ofSeconds(10))) > 9_000_000_000L);
        assertEquals(0, Deadlines.remainingNanos(Deadlines.deadline(Duration.ZERO) - 1));
        // A wait given in nanoseconds (the host side's) is clamped as a duration is: Long.MAX_VALUE,
        // "no limit", never passes, from any nanoTime; a negative wait has passed at once.
        for (long from : new long[] {0, Long.MAX_VALUE - 5, Long.MIN_VALUE + 5, -1}) {
            long never = Deadlines.deadline(from, Long.MAX_VALUE);
            assertFalse(Deadlines.passed(never, from), "no limit passed at once from " + from);
            assertFalse(Deadlines.passed(never, from + 365L * 24 * 3600 * 1_000_000_000L), "no limit, from " + from);
            assertEquals(Deadlines.deadline(from, Duration.ofMillis(1500)), Deadlines.deadline(from, 1_500_000_000L));
            assertTrue(Deadlines.passed(Deadlines.deadline(from, -7), from + 1));
        }
    }

    @Test
    void hostSideWaitsAreBoundedByTheWatchdogTimeoutOnly() {
        assertEquals(Duration.ofMinutes(10).toNanos(), HostSide.timeoutNanos(DEFAULTS));
        assertEquals(3_000_000_007L, HostSide.timeoutNanos(DEFAULTS.withWatchdog(Duration.ofSeconds(3, 7))));
        assertEquals(Long.MAX_VALUE, HostSide.timeoutNanos(DEFAULTS.withoutWatchdog()));
        assertEquals(Long.MAX_VALUE,
                HostSide.timeoutNanos(DEFAULTS.withoutWatchdog().withInitTimeout(Duration.ofSeconds(1))));
    }

    private static void expect(String message, Function<CommunicatorOptions, CommunicatorOptions> change) {
        assertEquals("CommunicatorOptions: " + message,
                assertThrows(IllegalArgumentException.class, () -> change.apply(DEFAULTS)).getMessage());
    }
}
