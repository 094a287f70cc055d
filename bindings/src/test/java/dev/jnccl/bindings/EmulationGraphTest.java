package dev.jnccl.bindings;

import static dev.jnccl.bindings.EmulationSupport.assertCuda;
import static dev.jnccl.bindings.EmulationSupport.cuda;
import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.jnccl.bindings.cuda.CudaRuntime;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The hand-written {@link CudaGraphs} downcalls against the host emulation: a capture of a copy, a
 * host function (a Java upcall) and an external event record, replayed; the capture status, the
 * thread's capture mode, and CUDA's errors for an illegal call and for an isolated wait.
 */
@Timeout(value = 60, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class EmulationGraphTest {
    private static final AtomicInteger HOST_CALLS = new AtomicInteger();

    @BeforeAll
    static void hostOnly() {
        EmulationSupport.assumeHost();
    }

    /** The host function of the capture: counts its calls. */
    static void hostFunction(MemorySegment userData) {
        HOST_CALLS.incrementAndGet();
    }

    private static int status(MemorySegment stream, Arena arena) {
        MemorySegment out = arena.allocate(JAVA_INT);
        cuda(CudaGraphs.cudaStreamIsCapturing(stream, out), "cudaStreamIsCapturing");
        return out.get(JAVA_INT, 0);
    }

    @Test
    void aCapturedCopyHostFunctionAndRecordReplay() throws Exception {
        cuda(CudaRuntime.cudaSetDevice(0), "cudaSetDevice");
        MemorySegment stream = EmulationSupport.newStream();
        MemorySegment done = EmulationSupport.newEvent(CudaRuntime.cudaEventDisableTiming());
        int bytes = 1 << 14;
        MemorySegment src = EmulationSupport.deviceMalloc(bytes);
        MemorySegment dst = EmulationSupport.deviceMalloc(bytes);
        try (Arena arena = Arena.ofShared()) {
            MemorySegment fn = Linker.nativeLinker().upcallStub(MethodHandles.lookup().findStatic(
                    EmulationGraphTest.class, "hostFunction", MethodType.methodType(void.class, MemorySegment.class)),
                    FunctionDescriptor.ofVoid(ADDRESS), arena);
            int calls = HOST_CALLS.get();
            cuda(CudaGraphs.cudaStreamBeginCapture(stream, CudaGraphs.CAPTURE_MODE_THREAD_LOCAL), "begin");
            assertEquals(CudaGraphs.CAPTURE_STATUS_ACTIVE, status(stream, arena));
            cuda(CudaRuntime.cudaMemcpyAsync(dst, src, bytes, CudaRuntime.cudaMemcpyDefault(), stream), "copy");
            cuda(CudaGraphs.cudaLaunchHostFunc(stream, fn, MemorySegment.NULL), "cudaLaunchHostFunc");
            cuda(CudaGraphs.cudaEventRecordWithFlags(done, stream, CudaGraphs.EVENT_RECORD_EXTERNAL), "record");
            MemorySegment slot = arena.allocate(ADDRESS);
            cuda(CudaGraphs.cudaStreamEndCapture(stream, slot), "end");
            MemorySegment graph = slot.get(ADDRESS, 0);
            cuda(CudaGraphs.cudaGraphInstantiate(slot, graph, 0L), "instantiate");
            MemorySegment exec = slot.get(ADDRESS, 0);
            cuda(CudaGraphs.cudaGraphDestroy(graph), "cudaGraphDestroy");
            assertEquals(CudaGraphs.CAPTURE_STATUS_NONE, status(stream, arena));
            cuda(CudaRuntime.cudaStreamSynchronize(stream), "sync");
            assertEquals(calls, HOST_CALLS.get(), "the capture ran the host function");
            Random random = new Random(System.nanoTime());
            for (int launch = 1; launch <= 3; launch++) {
                MemorySegment data = arena.allocate(bytes);
                for (int i = 0; i < bytes; i++) {
                    data.set(JAVA_BYTE, i, (byte) random.nextInt());
                }
                EmulationSupport.toDevice(src, data);
                cuda(CudaGraphs.cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
                cuda(CudaRuntime.cudaEventSynchronize(done), "the external record ran at the launch");
                MemorySegment back = arena.allocate(bytes);
                EmulationSupport.toHost(back, dst);
                assertEquals(-1L, data.mismatch(back), "launch " + launch);
                assertEquals(calls + launch, HOST_CALLS.get());
            }
            cuda(CudaGraphs.cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
            assertCuda(CudaRuntime.cudaErrorInvalidResourceHandle(), CudaGraphs.cudaGraphLaunch(exec, stream), "launch");
        } finally {
            EmulationSupport.free(src);
            EmulationSupport.free(dst);
            cuda(CudaRuntime.cudaEventDestroy(done), "cudaEventDestroy");
            cuda(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
        }
    }

    @Test
    void illegalCallsInvalidateTheCapture() {
        cuda(CudaRuntime.cudaSetDevice(0), "cudaSetDevice");
        MemorySegment stream = EmulationSupport.newStream();
        MemorySegment outside = EmulationSupport.newEvent(CudaRuntime.cudaEventDisableTiming());
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment slot = arena.allocate(ADDRESS);
            cuda(CudaRuntime.cudaEventRecord(outside, stream), "record");
            cuda(CudaGraphs.cudaStreamBeginCapture(stream, CudaGraphs.CAPTURE_MODE_RELAXED), "begin");
            assertCuda(CudaGraphs.ERROR_CAPTURE_ISOLATION, CudaRuntime.cudaStreamWaitEvent(stream, outside, 0), "wait");
            assertEquals(CudaGraphs.CAPTURE_STATUS_INVALIDATED, status(stream, arena));
            assertCuda(CudaGraphs.ERROR_CAPTURE_INVALIDATED, CudaGraphs.cudaStreamEndCapture(stream, slot), "end");
            assertEquals(MemorySegment.NULL, slot.get(ADDRESS, 0));
            cuda(CudaGraphs.cudaStreamBeginCapture(stream, CudaGraphs.CAPTURE_MODE_GLOBAL), "begin");
            assertCuda(CudaGraphs.ERROR_CAPTURE_UNSUPPORTED, CudaRuntime.cudaStreamSynchronize(stream), "sync");
            assertCuda(CudaGraphs.ERROR_CAPTURE_INVALIDATED, CudaGraphs.cudaStreamEndCapture(stream, slot), "end");
            MemorySegment mode = arena.allocate(JAVA_INT);
            mode.set(JAVA_INT, 0, CudaGraphs.CAPTURE_MODE_RELAXED);
            cuda(CudaGraphs.cudaThreadExchangeStreamCaptureMode(mode), "exchange");
            assertEquals(CudaGraphs.CAPTURE_MODE_GLOBAL, mode.get(JAVA_INT, 0));
            cuda(CudaGraphs.cudaThreadExchangeStreamCaptureMode(mode), "exchange back");
            assertEquals(CudaGraphs.CAPTURE_MODE_RELAXED, mode.get(JAVA_INT, 0));
            CudaRuntime.cudaGetLastError();
        } finally {
            cuda(CudaRuntime.cudaEventDestroy(outside), "cudaEventDestroy");
            cuda(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
        }
    }
}
