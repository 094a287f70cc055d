package dev.jnccl.cuda;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.Backend;
import dev.jnccl.JncclInterruptedException;
import dev.jnccl.JncclRuntime;
import dev.jnccl.internal.Backoff;
import dev.jnccl.testsupport.NativeEnv;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The waits of {@link CudaStream#synchronize()} and {@link CudaEvent#synchronize()} on a stream
 * held busy by the host emulation's per-item delay: an interrupt ends them within a second, with
 * {@link JncclInterruptedException} and the interrupt status kept; a long wait parks instead of
 * spinning. Host backend only (the delay is the emulation's).
 */
@Timeout(60)
class CudaWaitTest {
    private static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

    @BeforeEach
    void hostOnly() {
        Backend backend = JncclRuntime.query().backend();
        assumeTrue(backend == Backend.HOST, "needs the host emulation's stream delay (backend is " + backend + ")");
    }

    /** A stream whose every item first sleeps {@code millis}. */
    private static CudaStream slowStream(long millis) {
        Cuda.setDevice(0);
        try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_DELAY_US", Long.toString(millis * 1000))) {
            return CudaStream.create();
        }
    }

    @Test
    void interruptEndsAStreamWaitWithinASecond() throws Exception {
        interruptEndsTheWait("stream", (stream, event) -> stream.synchronize());
    }

    @Test
    void interruptEndsAnEventWaitWithinASecond() throws Exception {
        interruptEndsTheWait("event", (stream, event) -> event.synchronize());
    }

    private interface Wait {
        void run(CudaStream stream, CudaEvent event);
    }

    private static void interruptEndsTheWait(String what, Wait wait) throws Exception {
        try (CudaStream stream = slowStream(4000); DeviceMemory memory = DeviceMemory.allocate(256);
             CudaEvent event = CudaEvent.create()) {
            memory.fill((byte) 7, stream); // busy for 4 s
            stream.record(event);
            AtomicReference<Throwable> thrown = new AtomicReference<>();
            AtomicLong endedNanos = new AtomicLong();
            AtomicReference<Boolean> interruptedAfter = new AtomicReference<>();
            Thread waiter = Thread.ofPlatform().start(() -> {
                Cuda.setDevice(0);
                try {
                    wait.run(stream, event);
                } catch (Throwable e) {
                    thrown.set(e);
                }
                endedNanos.set(System.nanoTime());
                interruptedAfter.set(Thread.currentThread().isInterrupted());
            });
            Thread.sleep(300); // well inside the wait (past the short spin)
            assertTrue(waiter.isAlive(), what + " wait ended before the interrupt");
            long interrupted = System.nanoTime();
            waiter.interrupt();
            waiter.join(5000);
            assertTrue(!waiter.isAlive(), what + " wait still running 5 s after the interrupt");
            long tookMillis = (endedNanos.get() - interrupted) / 1_000_000;
            assertTrue(tookMillis < 1000, what + " wait ended " + tookMillis + " ms after the interrupt");
            JncclInterruptedException e = assertInstanceOf(JncclInterruptedException.class, thrown.get());
            assertInstanceOf(InterruptedException.class, e.getCause());
            assertTrue(e.getMessage().startsWith("synchronize: the wait for " + what + " "), e.getMessage());
            assertTrue(e.getMessage().contains("ended because the thread was interrupted; the work enqueued on the GPU"
                    + " was not cancelled"), e.getMessage());
            assertEquals(Boolean.TRUE, interruptedAfter.get(), "the interrupt status was cleared");
            assertTrue(!event.isComplete(), "the work was still running: the test did not hold the stream");
            stream.synchronize(); // the fill completes before the memory is freed
            assertTrue(event.isComplete());
        }
    }

    @Test
    void anInterruptedThreadThatCallsWaitFailsAtOnceAndAnIdleWaitStillSucceeds() throws Exception {
        try (CudaStream stream = slowStream(2000); DeviceMemory memory = DeviceMemory.allocate(64)) {
            AtomicReference<Throwable> thrown = new AtomicReference<>();
            Thread waiter = Thread.ofPlatform().start(() -> {
                Cuda.setDevice(0);
                Thread.currentThread().interrupt();
                stream.synchronize(); // idle: nothing to wait for, no exception
                memory.fill((byte) 1, stream);
                try {
                    stream.synchronize();
                } catch (Throwable e) {
                    thrown.set(e);
                }
            });
            waiter.join(1500);
            assertTrue(!waiter.isAlive(), "an interrupted thread waited for the busy stream");
            assertInstanceOf(JncclInterruptedException.class, thrown.get());
            stream.synchronize();
        }
    }

    @Test
    void aLongWaitParksInsteadOfSpinning() {
        try (CudaStream stream = slowStream(3000); DeviceMemory memory = DeviceMemory.allocate(64);
             CudaEvent event = CudaEvent.create()) {
            memory.fill((byte) 3, stream);
            stream.record(event); // delayed too: the event completes about 3 s after the fill
            long cpu0 = THREADS.getCurrentThreadCpuTime();
            long wall0 = System.nanoTime();
            stream.synchronize();
            long wall = System.nanoTime() - wall0;
            long cpu = THREADS.getCurrentThreadCpuTime() - cpu0;
            assertTrue(wall > 2_500_000_000L, "the stream was busy for only " + wall / 1_000_000 + " ms");
            assertTrue(cpu < wall / 10, "a " + wall / 1_000_000 + " ms wait used " + cpu / 1_000_000 + " ms of CPU");
            assertTrue(event.isComplete());
        }
    }

    @Test
    void backoffDoesNotSpinOnAnInterruptedThread() {
        Thread.currentThread().interrupt();
        try {
            long cpu0 = THREADS.getCurrentThreadCpuTime();
            long wall0 = System.nanoTime();
            for (long spins = 2000; spins < 2500; spins++) {
                Backoff.pause(spins); // 200 us parks: about 100 ms in all, interrupted or not
            }
            long wall = System.nanoTime() - wall0;
            long cpu = THREADS.getCurrentThreadCpuTime() - cpu0;
            assertTrue(Thread.currentThread().isInterrupted(), "pause cleared the interrupt status");
            assertTrue(wall > 50_000_000L, "500 long pauses took " + wall / 1000 + " us: they did not park");
            assertTrue(cpu < wall / 2, "500 pauses used " + cpu / 1000 + " us of CPU in " + wall / 1000 + " us");
            assertTrue(Backoff.pauseOrInterrupted(2000), "pauseOrInterrupted did not report the interrupt");
            assertTrue(Thread.currentThread().isInterrupted());
        } finally {
            Thread.interrupted();
        }
        assertTrue(!Backoff.pauseOrInterrupted(0));
    }
}
