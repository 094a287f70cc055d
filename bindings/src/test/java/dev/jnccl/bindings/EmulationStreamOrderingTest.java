package dev.jnccl.bindings;

import static dev.jnccl.bindings.EmulationSupport.assertCuda;
import static dev.jnccl.bindings.EmulationSupport.cuda;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_FLOAT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.testsupport.NativeEnv;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Streams of the host emulation are asynchronous FIFOs: with JNCCL_HOST_DELAY_US (read when a
 * stream is created) a copy enqueued on a slow stream is provably not done right after the call,
 * a reader on another stream without a wait sees the old data, and cudaStreamWaitEvent orders the
 * reader after it. Events query NotReady then Success and time at least the delay.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class EmulationStreamOrderingTest {
    private static final int DELAY_MS = 500;
    private static final int BYTES = 1 << 16;

    @BeforeAll
    static void hostOnly() {
        EmulationSupport.assumeHost();
    }

    /** A stream created while JNCCL_HOST_DELAY_US is set (and nothing narrows it). */
    static MemorySegment delayedStream(int delayMs, int flags, String device) {
        try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_DELAY_US", Integer.toString(delayMs * 1000),
                "JNCCL_HOST_DELAY_RANK", null, "JNCCL_HOST_DELAY_DEVICE", device)) {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment out = arena.allocate(java.lang.foreign.ValueLayout.ADDRESS);
                cuda(CudaRuntime.cudaStreamCreateWithFlags(out, flags), "cudaStreamCreateWithFlags");
                return out.get(java.lang.foreign.ValueLayout.ADDRESS, 0);
            }
        }
    }

    private static MemorySegment filled(Arena arena, long seed, int bytes) {
        MemorySegment host = arena.allocate(bytes);
        Random random = new Random(seed);
        for (int i = 0; i < bytes; i++) {
            host.set(JAVA_BYTE, i, (byte) (random.nextInt(255) + 1));
        }
        return host;
    }

    private static MemorySegment deviceWith(MemorySegment host) {
        MemorySegment device = EmulationSupport.deviceMalloc(host.byteSize());
        EmulationSupport.toDevice(device, host);
        return device;
    }

    @Test
    void aDelayedCopyIsInvisibleUntilAnEventWaitOrdersTheReader() {
        cuda(CudaRuntime.cudaSetDevice(0), "cudaSetDevice");
        MemorySegment slow = delayedStream(DELAY_MS, CudaRuntime.cudaStreamNonBlocking(), null);
        MemorySegment fast = EmulationSupport.newStream();
        MemorySegment start = EmulationSupport.newEvent(CudaRuntime.cudaEventDefault());
        MemorySegment end = EmulationSupport.newEvent(CudaRuntime.cudaEventDefault());
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment newData = filled(arena, 1, BYTES);
            MemorySegment oldData = filled(arena, 2, BYTES);
            assertNotEquals(-1L, newData.mismatch(oldData));
            MemorySegment src = deviceWith(newData);
            MemorySegment dst = deviceWith(oldData);
            MemorySegment stale = EmulationSupport.deviceMalloc(BYTES);
            MemorySegment ordered = EmulationSupport.deviceMalloc(BYTES);
            try {
                long t0 = System.nanoTime();
                cuda(CudaRuntime.cudaEventRecord(start, slow), "cudaEventRecord(start)");
                cuda(CudaRuntime.cudaMemcpyAsync(dst, src, BYTES, CudaRuntime.cudaMemcpyDeviceToDevice(), slow),
                        "cudaMemcpyAsync on the slow stream");
                cuda(CudaRuntime.cudaEventRecord(end, slow), "cudaEventRecord(end)");
                long enqueueMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                assertTrue(enqueueMs < DELAY_MS, "enqueueing blocked for " + enqueueMs + " ms: not asynchronous");

                // Right after the enqueue: nothing of it has happened.
                assertCuda(CudaRuntime.cudaErrorNotReady(), CudaRuntime.cudaStreamQuery(slow), "cudaStreamQuery(slow)");
                assertCuda(CudaRuntime.cudaErrorNotReady(), CudaRuntime.cudaEventQuery(end), "cudaEventQuery(end)");
                // Device memory is host memory in the emulation: look at it directly.
                assertEquals(-1L, dst.reinterpret(BYTES).mismatch(oldData), "the delayed copy is already visible");

                // A reader on another stream, without a wait, copies the old data.
                cuda(CudaRuntime.cudaMemcpyAsync(stale, dst, BYTES, CudaRuntime.cudaMemcpyDeviceToDevice(), fast),
                        "cudaMemcpyAsync (no wait)");
                cuda(CudaRuntime.cudaStreamSynchronize(fast), "cudaStreamSynchronize(fast)");
                long readMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                assertTrue(readMs < DELAY_MS, "the unordered reader finished after " + readMs
                        + " ms, later than the delay: the check below would prove nothing");
                MemorySegment got = arena.allocate(BYTES);
                EmulationSupport.toHost(got, stale);
                assertEquals(-1L, got.mismatch(oldData), "a copy without a wait saw the delayed copy's data");
                assertCuda(CudaRuntime.cudaErrorNotReady(), CudaRuntime.cudaEventQuery(end), "cudaEventQuery(end) still");

                // With cudaStreamWaitEvent the reader runs after the delayed copy.
                cuda(CudaRuntime.cudaStreamWaitEvent(fast, end, 0), "cudaStreamWaitEvent");
                cuda(CudaRuntime.cudaMemcpyAsync(ordered, dst, BYTES, CudaRuntime.cudaMemcpyDeviceToDevice(), fast),
                        "cudaMemcpyAsync (after the wait)");
                cuda(CudaRuntime.cudaStreamSynchronize(fast), "cudaStreamSynchronize(fast)");
                long orderedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                assertTrue(orderedMs >= DELAY_MS, "the ordered reader finished after only " + orderedMs + " ms");
                EmulationSupport.toHost(got, ordered);
                assertEquals(-1L, got.mismatch(newData), "the ordered copy did not see the delayed copy's data");

                assertCuda(CudaRuntime.cudaSuccess(), CudaRuntime.cudaEventQuery(end), "cudaEventQuery(end) after");
                cuda(CudaRuntime.cudaEventSynchronize(end), "cudaEventSynchronize");
                MemorySegment ms = arena.allocate(JAVA_FLOAT);
                cuda(CudaRuntime.cudaEventElapsedTime(ms, start, end), "cudaEventElapsedTime");
                float elapsed = ms.get(JAVA_FLOAT, 0);
                // The copy, which sleeps DELAY_MS first, lies between the two records.
                assertTrue(elapsed >= DELAY_MS, "cudaEventElapsedTime = " + elapsed + " ms < delay " + DELAY_MS);
                assertTrue(elapsed < 30_000, "cudaEventElapsedTime = " + elapsed + " ms");
                cuda(CudaRuntime.cudaStreamSynchronize(slow), "cudaStreamSynchronize(slow)");
                assertCuda(CudaRuntime.cudaSuccess(), CudaRuntime.cudaStreamQuery(slow), "cudaStreamQuery(slow) after");
            } finally {
                EmulationSupport.free(src);
                EmulationSupport.free(dst);
                EmulationSupport.free(stale);
                EmulationSupport.free(ordered);
            }
        } finally {
            cuda(CudaRuntime.cudaEventDestroy(start), "cudaEventDestroy");
            cuda(CudaRuntime.cudaEventDestroy(end), "cudaEventDestroy");
            cuda(CudaRuntime.cudaStreamDestroy(slow), "cudaStreamDestroy");
            cuda(CudaRuntime.cudaStreamDestroy(fast), "cudaStreamDestroy");
        }
    }

    @Test
    void anEventOfAnotherDeviceOrdersAStreamAndTheDelayCanBeNarrowedToOneDevice() {
        // JNCCL_HOST_DELAY_DEVICE=1: streams of device 1 are slow, those of device 0 are not.
        cuda(CudaRuntime.cudaSetDevice(1), "cudaSetDevice(1)");
        MemorySegment slow1 = delayedStream(DELAY_MS, CudaRuntime.cudaStreamNonBlocking(), "1");
        MemorySegment event1 = EmulationSupport.newEvent(CudaRuntime.cudaEventDisableTiming());
        cuda(CudaRuntime.cudaSetDevice(0), "cudaSetDevice(0)");
        MemorySegment notSlow0 = delayedStream(DELAY_MS, CudaRuntime.cudaStreamNonBlocking(), "1");
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment newData = filled(arena, 3, BYTES);
            MemorySegment oldData = filled(arena, 4, BYTES);
            cuda(CudaRuntime.cudaSetDevice(1), "cudaSetDevice(1)");
            MemorySegment src1 = deviceWith(newData);
            MemorySegment dst1 = deviceWith(oldData);
            cuda(CudaRuntime.cudaSetDevice(0), "cudaSetDevice(0)");
            MemorySegment dst0 = deviceWith(oldData);
            try {
                long t0 = System.nanoTime();
                cuda(CudaRuntime.cudaMemcpyAsync(dst1, src1, BYTES, CudaRuntime.cudaMemcpyDeviceToDevice(), slow1),
                        "cudaMemcpyAsync on device 1");
                cuda(CudaRuntime.cudaEventRecord(event1, slow1), "cudaEventRecord on device 1");
                // Device 0's stream is not delayed: a memset there completes long before the delay.
                cuda(CudaRuntime.cudaMemsetAsync(dst0, 0x11, 64, notSlow0), "cudaMemsetAsync on device 0");
                cuda(CudaRuntime.cudaStreamSynchronize(notSlow0), "cudaStreamSynchronize(device 0)");
                long fastMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                assertTrue(fastMs < DELAY_MS, "device 0's stream took " + fastMs + " ms: JNCCL_HOST_DELAY_DEVICE=1 ignored");
                assertCuda(CudaRuntime.cudaErrorNotReady(), CudaRuntime.cudaEventQuery(event1), "cudaEventQuery(device 1)");
                // Device 0's stream waits for device 1's event, then copies peer memory.
                cuda(CudaRuntime.cudaStreamWaitEvent(notSlow0, event1, 0), "cudaStreamWaitEvent across devices");
                cuda(CudaRuntime.cudaMemcpyPeerAsync(dst0, 0, dst1, 1, BYTES, notSlow0), "cudaMemcpyPeerAsync");
                cuda(CudaRuntime.cudaStreamSynchronize(notSlow0), "cudaStreamSynchronize(device 0)");
                long orderedMs = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                assertTrue(orderedMs >= DELAY_MS, "the cross-device wait returned after " + orderedMs + " ms");
                MemorySegment got = arena.allocate(BYTES);
                EmulationSupport.toHost(got, dst0);
                assertEquals(-1L, got.mismatch(newData), "peer copy ordered by the event saw old data");
            } finally {
                EmulationSupport.free(src1);
                EmulationSupport.free(dst1);
                EmulationSupport.free(dst0);
            }
        } finally {
            cuda(CudaRuntime.cudaEventDestroy(event1), "cudaEventDestroy");
            cuda(CudaRuntime.cudaStreamDestroy(slow1), "cudaStreamDestroy");
            cuda(CudaRuntime.cudaStreamDestroy(notSlow0), "cudaStreamDestroy");
        }
    }

    @Test
    void theLegacyStreamDrainsBlockingStreamsButNotNonBlockingOnes() {
        // CUDA's legacy default stream: a synchronous cudaMemcpy first waits for the device's
        // blocking streams (cudaStreamDefault), not for cudaStreamNonBlocking ones.
        cuda(CudaRuntime.cudaSetDevice(2), "cudaSetDevice(2)");
        MemorySegment blocking = delayedStream(200, CudaRuntime.cudaStreamDefault(), null);
        MemorySegment nonBlocking = delayedStream(1500, CudaRuntime.cudaStreamNonBlocking(), null);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment newData = filled(arena, 5, BYTES);
            MemorySegment oldData = filled(arena, 6, BYTES);
            MemorySegment src = deviceWith(newData);
            MemorySegment x = deviceWith(oldData);
            MemorySegment y = deviceWith(oldData);
            try {
                long t0 = System.nanoTime();
                cuda(CudaRuntime.cudaMemcpyAsync(x, src, BYTES, CudaRuntime.cudaMemcpyDeviceToDevice(), blocking), "copy on blocking");
                cuda(CudaRuntime.cudaMemcpyAsync(y, src, BYTES, CudaRuntime.cudaMemcpyDeviceToDevice(), nonBlocking), "copy on non-blocking");
                MemorySegment got = arena.allocate(BYTES);
                EmulationSupport.toHost(got, x); // legacy-stream cudaMemcpy
                assertEquals(-1L, got.mismatch(newData), "cudaMemcpy did not wait for the blocking stream");
                EmulationSupport.toHost(got, y);
                long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
                assertTrue(ms < 1500, "the legacy copies took " + ms + " ms: they waited for the non-blocking stream");
                assertEquals(-1L, got.mismatch(oldData), "cudaMemcpy waited for a non-blocking stream");
                cuda(CudaRuntime.cudaDeviceSynchronize(), "cudaDeviceSynchronize");
                EmulationSupport.toHost(got, y);
                assertEquals(-1L, got.mismatch(newData), "cudaDeviceSynchronize did not wait for the non-blocking stream");
            } finally {
                EmulationSupport.free(src);
                EmulationSupport.free(x);
                EmulationSupport.free(y);
            }
        } finally {
            cuda(CudaRuntime.cudaStreamDestroy(blocking), "cudaStreamDestroy");
            cuda(CudaRuntime.cudaStreamDestroy(nonBlocking), "cudaStreamDestroy");
            cuda(CudaRuntime.cudaSetDevice(0), "cudaSetDevice(0)");
        }
    }
}
