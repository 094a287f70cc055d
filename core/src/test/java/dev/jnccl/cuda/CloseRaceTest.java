package dev.jnccl.cuda;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Many threads closing the same stream, event or device memory at once: exactly one destroys the
 * handle. A second cudaStreamDestroy / cudaEventDestroy / cudaFree of the same handle fails
 * (invalid handle or pointer), so a close that is not atomic shows up as a CudaException here.
 */
@Timeout(120)
class CloseRaceTest {
    private static final int THREADS = 8;
    private static final int ROUNDS = 300;

    @Test
    void racingClosesDestroyEachHandleOnce() throws Exception {
        race("stream", CudaStream::create);
        race("event", CudaEvent::create);
        race("device memory", () -> DeviceMemory.allocate(256));
    }

    private interface Factory {
        AutoCloseable create();
    }

    private static void race(String what, Factory factory) throws Exception {
        ConcurrentLinkedQueue<Throwable> failures = new ConcurrentLinkedQueue<>();
        AutoCloseable[] current = new AutoCloseable[1];
        CyclicBarrier start = new CyclicBarrier(THREADS, () -> current[0] = factory.create());
        CyclicBarrier done = new CyclicBarrier(THREADS);
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < THREADS; t++) {
            threads.add(Thread.ofPlatform().start(() -> {
                try {
                    Cuda.setDevice(0);
                    for (int round = 0; round < ROUNDS; round++) {
                        start.await(30, TimeUnit.SECONDS);
                        try {
                            current[0].close();
                        } catch (Throwable e) {
                            failures.add(e);
                        }
                        done.await(30, TimeUnit.SECONDS);
                    }
                } catch (Exception e) {
                    failures.add(e);
                }
            }));
        }
        for (Thread thread : threads) {
            thread.join(TimeUnit.SECONDS.toMillis(100));
        }
        assertTrue(failures.isEmpty(), () -> what + ": " + failures.size() + " close(s) failed, first: "
                + failures.peek());
    }
}
