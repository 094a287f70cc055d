package dev.jnccl.junit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectClass;

import dev.jnccl.Backend;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.JncclRuntime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.platform.engine.TestExecutionResult;
import org.junit.platform.testkit.engine.EngineExecutionResults;
import org.junit.platform.testkit.engine.EngineTestKit;
import org.junit.platform.testkit.engine.Event;
import org.junit.platform.testkit.engine.Events;
import org.opentest4j.AssertionFailedError;
import org.opentest4j.TestAbortedException;

/**
 * {@link MultiRankTest} and {@link InjectFault} as a user's build sees them: each case runs a class of
 * {@link MultiRankFixtures} through JUnit's engine test kit and checks the events JUnit reported (names,
 * outcomes, failures and their messages), while the fixtures' rank bodies check their own data.
 */
class MultiRankExtensionTest {
    @BeforeEach
    void clear() {
        MultiRankFixtures.SEEN.clear();
    }

    private static EngineExecutionResults run(Class<?> fixture, String... configuration) {
        var request = EngineTestKit.engine("junit-jupiter").selectors(selectClass(fixture));
        for (int i = 0; i < configuration.length; i += 2) {
            request.configurationParameter(configuration[i], configuration[i + 1]);
        }
        EngineExecutionResults results = request.execute();
        List<String> left = Threads.stacks("jnccl-rank-");
        assertTrue(left.isEmpty(), () -> fixture.getSimpleName() + ": rank threads outlived the test: " + left);
        return results;
    }

    private static String backend() {
        return JncclRuntime.query().backend() == Backend.HOST ? "host" : "cuda";
    }

    private static List<String> names(Events events) {
        return events.map(event -> event.getTestDescriptor().getDisplayName()).toList();
    }

    private static Throwable thrown(Event event) {
        return event.getRequiredPayload(TestExecutionResult.class).getThrowable().orElseThrow();
    }

    /** The one failed invocation's exception (every other invocation must have passed). */
    private static AssertionFailedError failure(Class<?> fixture) {
        Events tests = run(fixture).testEvents();
        List<Event> failed = tests.failed().list();
        assertEquals(1, failed.size(), () -> "one failed invocation: " + tests.list());
        return assertInstanceOf(AssertionFailedError.class, thrown(failed.getFirst()));
    }

    /** {@code invocations} invocations ran, and passed (else the failures are the message). */
    private static void assertPassed(Events tests, int invocations) {
        List<Throwable> failures = tests.failed().stream().map(MultiRankExtensionTest::thrown).toList();
        assertTrue(failures.isEmpty(), () -> failures.stream().map(MultiRankExtensionTest::withCauses)
                .collect(Collectors.joining("\n")));
        tests.assertStatistics(stats -> stats.started(invocations).succeeded(invocations));
    }

    private static String withCauses(Throwable t) {
        StringBuilder text = new StringBuilder(t.toString());
        for (Throwable s : t.getSuppressed()) {
            text.append("\n  suppressed: ").append(s);
        }
        return t.getCause() == null ? text.toString() : text.append("\n  cause: ").append(withCauses(t.getCause())).toString();
    }

    /**
     * Skips (visibly) a case whose fixture needs {@code devices} devices, one per rank: the emulation
     * has 8; a GPU machine runs the case on real NCCL when it has enough.
     */
    private static void assumeDevices(int devices) {
        int visible = JncclRuntime.query().deviceCount();
        org.junit.jupiter.api.Assumptions.assumeTrue(visible >= devices, () -> "the fixture needs " + devices
                + " devices; backend " + backend() + " has " + visible);
    }

    private static void assumeHost() {
        org.junit.jupiter.api.Assumptions.assumeTrue(JncclRuntime.query().backend() == Backend.HOST,
                "fault injection needs the host emulation");
    }

    @Test
    void eachWorldIsAnInvocationNamedWithItsWorldAndBackendAndEveryRankChecksItsData() {
        assumeDevices(3);
        Events tests = run(MultiRankFixtures.Worlds.class).testEvents();
        assertPassed(tests, 3);
        String b = backend();
        assertEquals(List.of("world 1 [" + b + "]", "world 2 [" + b + "]", "world 3 [" + b + "]"),
                names(tests.started()));
        Set<String> expected = new TreeSet<>();
        Backend backend = JncclRuntime.query().backend();
        for (int world = 1; world <= 3; world++) {
            for (int rank = 0; rank < world; rank++) {
                expected.add("world " + world + " [" + b + "]: rank " + rank + " of " + world + " on device " + rank
                        + " (" + rank + ") " + backend);
            }
        }
        assertEquals(expected, new TreeSet<>(MultiRankFixtures.SEEN));
    }

    @Test
    void sharedPutsEveryRankOnDeviceZero() {
        Events tests = run(MultiRankFixtures.Shared.class).testEvents();
        List<Event> started = tests.started().list();
        if (!tests.aborted().list().isEmpty()) {
            // real NCCL without 2.30 or NCCL_MULTI_RANK_GPU_ENABLE=1: the reason says which
            String reason = thrown(tests.aborted().list().getFirst()).getMessage();
            assertTrue(reason.contains("NCCL_MULTI_RANK_GPU_ENABLE") || reason.contains("2.30"), reason);
            return;
        }
        assertPassed(tests, 1);
        assertEquals("world 3 [" + backend() + ", shared]", started.getFirst().getTestDescriptor().getDisplayName());
        assertEquals(Set.of("rank 0 on device 0", "rank 1 on device 0", "rank 2 on device 0"),
                Set.copyOf(MultiRankFixtures.SEEN));
    }

    @Test
    void aWorldLargerThanTheVisibleDevicesIsSkippedWithTheReason() {
        assumeDevices(2);
        Events tests = run(MultiRankFixtures.TooFewDevices.class).testEvents();
        tests.assertStatistics(stats -> stats.started(2).succeeded(1).aborted(1).failed(0));
        Event skipped = tests.aborted().list().getFirst();
        assertEquals("world 64 [" + backend() + "]", skipped.getTestDescriptor().getDisplayName());
        String reason = assertInstanceOf(TestAbortedException.class, thrown(skipped)).getMessage();
        int devices = JncclRuntime.query().deviceCount();
        assertTrue(reason.contains("world 64 needs 64 devices") && reason.contains("has " + devices + " visible"),
                reason);
    }

    @Test
    void autoFollowsTheRunsPlacement() {
        assumeHost();
        Events gpus = run(MultiRankFixtures.AutoPlacement.class).testEvents();
        gpus.assertStatistics(stats -> stats.started(1).aborted(1));
        String reason = thrown(gpus.aborted().list().getFirst()).getMessage();
        assertTrue(reason.startsWith("Assumption failed: world 9 needs 9 devices"), reason);
        Events host = withPlacement("host", () -> run(MultiRankFixtures.AutoPlacement.class).testEvents());
        assertPassed(host, 1);
        assertEquals("world 9 [host, shared]", names(host.started()).getFirst());
        Set<String> expected = new TreeSet<>();
        for (int rank = 0; rank < 9; rank++) {
            expected.add("rank " + rank + " on device " + rank % 8);
        }
        assertEquals(expected, new TreeSet<>(MultiRankFixtures.SEEN));
    }

    @Test
    void anUnknownRunPlacementIsRefused() {
        withPlacement("everywhere", () -> {
            assertRefused(MultiRankFixtures.AutoPlacement.class, "system property jnccl.junit.placement is"
                    + " 'everywhere' (for AutoPlacement.nineRanks()); expected one of gpus, shared, host");
            return null;
        });
    }

    /** {@code body} with {@code -Djnccl.junit.placement=placement}; the property is restored after. */
    private static <T> T withPlacement(String placement, java.util.function.Supplier<T> body) {
        String before = System.getProperty(Placement.PROPERTY);
        System.setProperty(Placement.PROPERTY, placement);
        try {
            return body.get();
        } finally {
            if (before == null) {
                System.clearProperty(Placement.PROPERTY);
            } else {
                System.setProperty(Placement.PROPERTY, before);
            }
        }
    }

    @Test
    void aFailingRankIsNamedWithTheWorldAndTheReleasedRanksErrorsAreAttached() {
        assumeDevices(3);
        AssertionFailedError failure = failure(MultiRankFixtures.OneRankFails.class);
        String message = failure.getMessage();
        assertTrue(message.startsWith("world 3 [" + backend() + "] of OneRankFails.rankOneThrows(): rank 1 failed"
                + "\n  rank 1: java.lang.IllegalStateException: rank 1 gave up"), message);
        assertTrue(message.contains("2 other rank(s) were released by the pack"), message);
        assertEquals("rank 1 gave up", assertInstanceOf(IllegalStateException.class, failure.getCause()).getMessage());
        List<Throwable> suppressed = List.of(failure.getSuppressed());
        assertEquals(2, suppressed.size(), () -> "ranks 0 and 2's errors: " + suppressed);
        suppressed.forEach(e -> assertInstanceOf(CommunicatorAbortedException.class, e));
        assertTrue(suppressed.stream().allMatch(e -> e.getMessage().contains("rank 1")), suppressed::toString);
    }

    @Test
    void everyFailingRankIsNamed() {
        assumeDevices(4);
        AssertionFailedError failure = failure(MultiRankFixtures.TwoRanksFail.class);
        String message = failure.getMessage();
        assertTrue(message.startsWith("world 4 [" + backend() + "] of TwoRanksFail.ranksZeroAndTwoThrow(): 2 ranks failed"
                + "\n  rank 0: java.io.IOException: rank 0 lost its input"
                + "\n  rank 2: java.io.IOException: rank 2 lost its input"), message);
        assertEquals("rank 0 lost its input", failure.getCause().getMessage());
        List<String> attached = Stream.of(failure.getSuppressed()).map(Throwable::getMessage).toList();
        assertTrue(attached.contains("rank 2 lost its input"), attached::toString);
        long released = Stream.of(failure.getSuppressed()).filter(CommunicatorAbortedException.class::isInstance).count();
        assertEquals(2, released, attached::toString);
    }

    @Test
    void anAssumptionThatFailsInARankSkipsTheInvocation() {
        assumeDevices(2);
        Events tests = run(MultiRankFixtures.AssumptionInARank.class).testEvents();
        tests.assertStatistics(stats -> stats.started(1).aborted(1).failed(0));
        Throwable reason = thrown(tests.aborted().list().getFirst());
        assertEquals("Assumption failed: rank 1 needs a second NIC", reason.getMessage());
    }

    @Test
    void anInjectedFailureNamesTheRankAndItsOperation() {
        assumeHost();
        AssertionFailedError failure = failure(MultiRankFixtures.FaultFails.class);
        String message = failure.getMessage();
        assertTrue(message.startsWith("world 3 [host] of FaultFails.secondOperationOfRankOneFails(): rank 1 failed"),
                message);
        assertTrue(message.contains("injected failure at operation 2 of rank 1"), message);
        assertInstanceOf(CommunicatorAbortedException.class, failure.getCause());
        assertEquals(2, failure.getSuppressed().length, () -> Arrays.toString(failure.getSuppressed()));
    }

    @Test
    void ranksThatAllCatchTheAbortAndReturnPass() {
        assumeHost();
        assertPassed(run(MultiRankFixtures.FaultCaught.class).testEvents(), 1);
        List<String> seen = new ArrayList<>(MultiRankFixtures.SEEN);
        assertEquals(2, seen.size(), seen::toString);
        assertTrue(seen.stream().anyMatch(s -> s.startsWith("rank 0 caught: ")), seen::toString);
        assertTrue(seen.stream().anyMatch(s -> s.startsWith("rank 1 caught: ")), seen::toString);
    }

    @Test
    void anInjectedHangIsEndedByTheWatchdogWithItsVerdict() {
        assumeHost();
        AssertionFailedError failure = failure(MultiRankFixtures.FaultHangs.class);
        assertTrue(failure.getMessage().startsWith("world 2 [host] of FaultHangs.secondOperationOfRankOneHangs(): "),
                failure::getMessage);
        CommunicatorAbortedException cause = assertInstanceOf(CommunicatorAbortedException.class, failure.getCause());
        String verdict = cause.diagnosis().orElseThrow(() -> new AssertionError("no diagnosis: " + cause)).verdict();
        assertTrue(verdict.contains("transaction #2"), verdict);
    }

    @Test
    void anInjectedLagKeepsTheDataRight() {
        assumeHost();
        assertPassed(run(MultiRankFixtures.FaultLags.class).testEvents(), 1);
    }

    @Test
    void anInjectedLagPastTheWatchdogAbortsThePack() {
        assumeHost();
        AssertionFailedError failure = failure(MultiRankFixtures.FaultLagsPastTheWatchdog.class);
        assertInstanceOf(CommunicatorAbortedException.class, failure.getCause(), failure::getMessage);
        assertTrue(failure.getMessage().contains("transaction #1"), failure::getMessage);
    }

    @Test
    void theDeadlineEndsAHungTestWithFlightRecordersAndStacks() {
        assumeHost();
        AssertionFailedError failure = failure(MultiRankFixtures.Deadline.class);
        String message = failure.getMessage();
        assertTrue(message.startsWith("world 2 [host] of Deadline.hangsWithoutAWatchdog() did not finish within 5 s"
                + " (@MultiRankTest timeoutSeconds): the pack was aborted."), message);
        for (int rank = 0; rank < 2; rank++) {
            assertTrue(message.contains("rank " + rank + " recent transactions:\n  "), message);
            assertTrue(message.contains("jnccl-rank-" + rank + " ("), message);
        }
        assertTrue(message.contains("dev.jnccl.Communicator.synchronize("), message);
        assertTrue(message.contains("#2"), () -> "the flight recorder shows transaction #2: " + message);
        List<String> left = Threads.stacks("jnccl-rank-");
        assertTrue(left.isEmpty(), () -> "rank threads outlived the deadline's abort: " + left);
    }

    @Test
    void anInterruptOfTheTestThreadAbortsThePack() {
        assumeDevices(2);
        Event failed = run(MultiRankFixtures.InterruptedByJUnitTimeout.class).testEvents().failed().list().getFirst();
        Throwable thrown = thrown(failed);
        assertInstanceOf(java.util.concurrent.TimeoutException.class, thrown, thrown::toString);
        assertTrue(thrown.getMessage().contains("timed out after 1500 milliseconds"), thrown::getMessage);
    }

    @Test
    void multiRankTestsRunOneAtATimeUnderParallelExecution() {
        assumeDevices(3);
        MultiRankFixtures.MOST_RUNNING.set(0);
        assertPassed(run(MultiRankFixtures.Parallel.class, "junit.jupiter.execution.parallel.enabled", "true",
                "junit.jupiter.execution.parallel.mode.default", "concurrent",
                "junit.jupiter.execution.parallel.config.strategy", "fixed",
                "junit.jupiter.execution.parallel.config.fixed.parallelism", "4")
                .testEvents(), 4);
        assertEquals(1, MultiRankFixtures.MOST_RUNNING.get(), "packs running at once");
    }

    @Test
    void badAnnotationValuesAreRefusedNamingTheValueAndTheRange() {
        assertRefused(MultiRankFixtures.EmptyWorlds.class,
                "@MultiRankTest on EmptyWorlds.test(): worlds is empty; give one or more world sizes in [1, 1024]");
        assertRefused(MultiRankFixtures.ZeroWorld.class,
                "@MultiRankTest on ZeroWorld.test(): worlds [2, 0] contains 0, outside the allowed range [1, 1024]");
        assertRefused(MultiRankFixtures.NegativeWorld.class,
                "@MultiRankTest on NegativeWorld.test(): worlds [-3] contains -3, outside the allowed range [1, 1024]");
        assertRefused(MultiRankFixtures.ZeroTimeout.class,
                "@MultiRankTest on ZeroTimeout.test(): timeoutSeconds 0 is outside the allowed range [1, 86400]");
        assertRefused(MultiRankFixtures.FaultRankOutsideTheWorld.class, "@InjectFault(kind = FAIL) on"
                + " FaultRankOutsideTheWorld.test(): rank 2 is outside world 2 of worlds [4, 2]; the allowed range is [0, 1]");
        assertRefused(MultiRankFixtures.FaultAtZero.class, "@InjectFault(kind = HANG) on FaultAtZero.test(): at 0 is"
                + " outside the allowed range [1, 2147483647] (operations count from 1)");
        assertRefused(MultiRankFixtures.LagWithoutMicros.class, "@InjectFault(kind = LAG) on LagWithoutMicros.test():"
                + " lagMicros 0 is outside the allowed range [1, 60000000]");
    }

    private static void assertRefused(Class<?> fixture, String expected) {
        EngineExecutionResults results = run(fixture);
        results.testEvents().assertStatistics(stats -> stats.started(0));
        List<Throwable> failures = results.containerEvents().failed().stream().map(MultiRankExtensionTest::thrown)
                .toList();
        assertEquals(1, failures.size(), () -> fixture.getSimpleName() + ": " + failures);
        assertEquals(expected, failures.getFirst().getMessage(),
                () -> failures.stream().map(Throwable::toString).collect(Collectors.joining("\n")));
    }
}
