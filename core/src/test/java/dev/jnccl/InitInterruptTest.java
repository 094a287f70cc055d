package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * Init waits for the other ranks (up to the init timeout, 120 s by default); an interrupt of the
 * waiting thread ends it within about a second with {@link CommunicatorAbortedException}, the
 * {@link InterruptedException} as its cause and the interrupt status kept, and nothing is left.
 */
class InitInterruptTest {

    @Test
    void anInterruptEndsInitPromptly() throws Exception {
        AtomicReference<Throwable> thrown = new AtomicReference<>();
        AtomicReference<Boolean> statusKept = new AtomicReference<>();
        AtomicReference<Long> endedNanos = new AtomicReference<>();
        UniqueId id = UniqueId.generate();
        Thread rank0 = Thread.ofPlatform().name("init-rank-0").start(() -> {
            // Rank 1 of 2 never comes: only the interrupt can end this before the init timeout.
            try (Communicator ignored = Communicator.initRank(id, 0, 2, 0, CommunicatorOptions.defaults())) {
                thrown.set(new AssertionError("init returned although rank 1 never joined"));
            } catch (Throwable t) {
                endedNanos.set(System.nanoTime());
                thrown.set(t);
                statusKept.set(Thread.currentThread().isInterrupted());
            }
        });
        Thread.sleep(500);
        long interrupted = System.nanoTime();
        rank0.interrupt();
        assertTrue(rank0.join(Duration.ofSeconds(10)), "init did not end within 10 s of the interrupt");
        Throwable t = thrown.get();
        assertInstanceOf(CommunicatorAbortedException.class, t);
        assertInstanceOf(InterruptedException.class, t.getCause(), () -> "cause of " + t);
        assertTrue(t.getMessage().contains("interrupted"), t::getMessage);
        assertEquals(Boolean.TRUE, statusKept.get(), "the interrupt status is kept");
        assertNotNull(endedNanos.get());
        long millis = TimeUnit.NANOSECONDS.toMillis(endedNanos.get() - interrupted);
        assertTrue(millis < 1_500, "init ended " + millis + " ms after the interrupt");
    }
}
