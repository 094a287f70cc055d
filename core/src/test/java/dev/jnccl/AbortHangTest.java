package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.cuda.CudaStream;
import dev.jnccl.testsupport.ChildJvm;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * An abort whose ncclCommAbort never returns (host emulation: {@code JNCCL_HOST_FAULT=hang-abort})
 * is bounded: {@link Communicator#abort} returns at the abort's bound and the communicator is
 * abandoned (its reason says so, later calls throw {@link CommunicatorAbortedException} naming it,
 * close returns at once and leaks instead of destroying, one ERROR line tells what is leaked); an
 * interrupt ends the wait at once with the interrupt status kept. Each case runs in a child JVM:
 * the thread blocked in the emulation's abort stays there for good, and the child's normal exit
 * after main returns shows that no non-daemon thread was left.
 */
class AbortHangTest {
    /** The close timeout of the abandoning case; also the abort's bound (its least, 5 s). */
    static final Duration CLOSE = Duration.ofSeconds(5);
    /** The close timeout of the interrupted case: far longer than the child may live, so only the interrupt ends the wait. */
    static final Duration LONG_CLOSE = Duration.ofMinutes(10);

    enum Scenario { ABANDONED, INTERRUPTED }

    @ParameterizedTest(name = "{0}")
    @EnumSource(CommunicatorMode.class)
    void anAbortThatHangsIsAbandonedAtItsBound(CommunicatorMode mode) throws Exception {
        String output = runChild(Scenario.ABANDONED, mode);
        assertTrue(output.contains("ncclCommAbort did not return within " + CLOSE.toMillis() + " ms"), output);
        assertTrue(output.contains("native resources leaked on purpose") && output.contains("jnccl-abort-rank-0"),
                output);
        assertTrue(output.contains("ncclCommAbort of rank 0 hangs for ever"), "the fault did not hit\n" + output);
    }

    @ParameterizedTest(name = "{0}")
    @EnumSource(CommunicatorMode.class)
    void anInterruptEndsTheWaitForAHangingAbort(CommunicatorMode mode) throws Exception {
        String output = runChild(Scenario.INTERRUPTED, mode);
        assertTrue(output.contains("interrupted while waiting for ncclCommAbort; it goes on on thread"
                + " jnccl-abort-rank-0"), output);
        assertFalse(output.contains("did not return within"), "abandoned although interrupted long before the bound\n"
                + output);
    }

    private static String runChild(Scenario scenario, CommunicatorMode mode) throws Exception {
        assumeTrue(JncclRuntime.query().backend() == Backend.HOST, "JNCCL_HOST_FAULT=hang-abort is the emulation's");
        ChildJvm.Result result = ChildJvm.run(List.of("--enable-native-access=ALL-UNNAMED", "-Djnccl.backend=host"),
                Map.of("JNCCL_HOST_FAULT", "hang-abort", "JNCCL_HOST_FAULT_RANK", "0"), Probe.class,
                scenario.name(), mode.name());
        // Exit code 0: main returned and the JVM ended although the abort's thread never returns.
        assertEquals(0, result.exitCode(), result.output());
        assertTrue(result.output().contains("PASS " + scenario), result.output());
        return result.output();
    }

    /** The child JVM: one scenario on a world-1 communicator whose ncclCommAbort hangs. */
    static final class Probe {
        private Probe() {}

        public static void main(String[] args) throws Exception {
            Scenario scenario = Scenario.valueOf(args[0]);
            CommunicatorMode mode = CommunicatorMode.valueOf(args[1]);
            if (scenario == Scenario.ABANDONED) {
                abandoned(mode);
            } else {
                interrupted(mode);
            }
            System.out.println("PASS " + scenario);
            System.out.flush();
        }

        /**
         * abort() returns once the bound has passed, the communicator is abandoned and says so: its
         * reason, a later call's exception; close returns at once, the abort's thread stays blocked.
         */
        private static void abandoned(CommunicatorMode mode) throws Exception {
            CommunicatorOptions options = CommunicatorOptions.defaults().withMode(mode).withCloseTimeout(CLOSE);
            Communicator comm = Communicator.single(0, options);
            try (CudaStream stream = CudaStream.create()) {
                Thread aborting = Thread.ofPlatform().name("aborting").start(() -> comm.abort("the test aborts"));
                // The bound plus a margin: a hang here (the abort waited for for ever) fails.
                assertTrue(aborting.join(CLOSE.plusSeconds(20)), "abort() did not return after its bound");
                assertTrue(comm.isAborted());
                String reason = comm.abortReason();
                assertTrue(reason.startsWith("the test aborts; then ncclCommAbort did not return within "
                        + CLOSE.toMillis() + " ms: the communicator was abandoned"), reason);
                CommunicatorAbortedException later = assertThrows(CommunicatorAbortedException.class,
                        () -> comm.begin(stream));
                assertTrue(later.getMessage().contains("the communicator was abandoned"), later::getMessage);
                Thread closing = Thread.ofPlatform().name("closing").start(comm::close);
                assertTrue(closing.join(CLOSE.plusSeconds(20)), "close() did not return after an abandoned abort");
                assertTrue(comm.isClosed());
                comm.close(); // idempotent
                Thread abortThread = thread("jnccl-abort-rank-0");
                assertNotNull(abortThread, "the abort's thread is gone although ncclCommAbort never returns");
                assertTrue(abortThread.isDaemon(), "the abort's thread must not keep the JVM alive");
            }
        }

        /**
         * A thread waiting for the hanging abort is interrupted: abort() returns at once with the
         * interrupt status kept (the bound is far away), the communicator is aborted; close() from an
         * interrupted thread also returns at once.
         */
        private static void interrupted(CommunicatorMode mode) throws Exception {
            CommunicatorOptions options = CommunicatorOptions.defaults().withMode(mode).withCloseTimeout(LONG_CLOSE);
            Communicator comm = Communicator.single(0, options);
            AtomicBoolean statusKept = new AtomicBoolean();
            AtomicBoolean aborted = new AtomicBoolean();
            AtomicReference<Throwable> thrown = new AtomicReference<>();
            Thread aborting = Thread.ofPlatform().name("aborting").start(() -> {
                try {
                    comm.abort("the test aborts");
                    statusKept.set(Thread.currentThread().isInterrupted());
                    aborted.set(comm.isAborted());
                    comm.close(); // interrupted: leaves the memory to the abort's thread
                } catch (Throwable t) {
                    thrown.set(t);
                }
            });
            awaitState(aborting);
            aborting.interrupt();
            // Far below the bound (10 min): only the interrupt can end this wait in time.
            assertTrue(aborting.join(Duration.ofSeconds(20)), "abort() did not end on the interrupt");
            assertNull(thrown.get(), () -> "abort or close threw " + thrown.get());
            assertTrue(statusKept.get(), "the interrupt status was not kept");
            assertTrue(aborted.get(), "not aborted when abort() returned");
            assertTrue(comm.isClosed());
            assertEquals("the test aborts", comm.abortReason());
            Thread abortThread = thread("jnccl-abort-rank-0");
            assertNotNull(abortThread, "the abort's thread is gone although ncclCommAbort never returns");
            assertTrue(abortThread.isDaemon(), "the abort's thread must not keep the JVM alive");
        }

        /** Waits (bounded) until {@code thread} is parked: in the wait for the abort's thread. */
        private static void awaitState(Thread thread) throws InterruptedException {
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (thread.getState() != Thread.State.TIMED_WAITING || thread("jnccl-abort-rank-0") == null) {
                assertTrue(System.nanoTime() - deadline < 0, "abort() never started waiting: " + thread.getState());
                Thread.sleep(10);
            }
        }

        private static Thread thread(String name) {
            return Thread.getAllStackTraces().keySet().stream().filter(t -> t.getName().equals(name) && t.isAlive())
                    .findFirst().orElse(null);
        }
    }
}
