package dev.jnccl.bindings;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;

/**
 * Hand-written downcalls of the CUDA runtime's stream capture and graph functions, in the shapes
 * jextract gives the generated {@code CudaRuntime} (an {@code int} cudaError_t, handles and
 * out-pointers as {@link MemorySegment}s). The signatures and values are those of
 * {@code cuda_runtime_api.h} and {@code driver_types.h} of CUDA 13.0 (cudaGraphInstantiate has the
 * three-argument form of CUDA 12 and later; CUDA 11's five-argument form is not bound, see
 * {@link #isSupportedBy}). The host emulation implements every function here. Each handle is
 * looked up on first use in the same lookup as the generated bindings; a library without the
 * function gives a {@link NativeLibraryException} naming it instead of a link error. Not API.
 */
public final class CudaGraphs {
    /** The first CUDA runtime whose {@code cudaGraphInstantiate} has the signature bound here (a version code). */
    public static final int SINCE_VERSION = VersionCodes.of(12, 0, 0);

    /** cudaStreamCaptureModeGlobal. */
    public static final int CAPTURE_MODE_GLOBAL = 0;
    /** cudaStreamCaptureModeThreadLocal. */
    public static final int CAPTURE_MODE_THREAD_LOCAL = 1;
    /** cudaStreamCaptureModeRelaxed. */
    public static final int CAPTURE_MODE_RELAXED = 2;
    /** cudaStreamCaptureStatusNone. */
    public static final int CAPTURE_STATUS_NONE = 0;
    /** cudaStreamCaptureStatusActive. */
    public static final int CAPTURE_STATUS_ACTIVE = 1;
    /** cudaStreamCaptureStatusInvalidated. */
    public static final int CAPTURE_STATUS_INVALIDATED = 2;
    /** cudaEventRecordDefault. */
    public static final int EVENT_RECORD_DEFAULT = 0x00;
    /** cudaEventRecordExternal: in a capture, the record becomes a node that records at each launch. */
    public static final int EVENT_RECORD_EXTERNAL = 0x01;
    /** cudaEventWaitDefault. */
    public static final int EVENT_WAIT_DEFAULT = 0x00;
    /** cudaEventWaitExternal: in a capture, the wait becomes a node that waits at each launch. */
    public static final int EVENT_WAIT_EXTERNAL = 0x01;
    /** cudaErrorStreamCaptureUnsupported: the operation is not permitted when the stream is capturing. */
    public static final int ERROR_CAPTURE_UNSUPPORTED = 900;
    /** cudaErrorStreamCaptureInvalidated: the capture was invalidated by an earlier error. */
    public static final int ERROR_CAPTURE_INVALIDATED = 901;
    /** cudaErrorStreamCaptureMerge: two independent captures would merge. */
    public static final int ERROR_CAPTURE_MERGE = 902;
    /** cudaErrorStreamCaptureUnmatched: the capture was not begun on this stream. */
    public static final int ERROR_CAPTURE_UNMATCHED = 903;
    /** cudaErrorStreamCaptureUnjoined: a forked stream was not joined back into the origin stream. */
    public static final int ERROR_CAPTURE_UNJOINED = 904;
    /** cudaErrorStreamCaptureIsolation: a dependency on work outside the capture. */
    public static final int ERROR_CAPTURE_ISOLATION = 905;
    /** cudaErrorStreamCaptureImplicit: the legacy stream would depend on a capture. */
    public static final int ERROR_CAPTURE_IMPLICIT = 906;
    /** cudaErrorCapturedEvent: the event was last recorded in a capturing stream. */
    public static final int ERROR_CAPTURED_EVENT = 907;
    /** cudaErrorStreamCaptureWrongThread: a non-relaxed capture ended from another thread. */
    public static final int ERROR_CAPTURE_WRONG_THREAD = 908;
    /** cudaErrorTimeout. */
    public static final int ERROR_TIMEOUT = 909;
    /** cudaErrorGraphExecUpdateFailure. */
    public static final int ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910;

    private CudaGraphs() {}

    /**
     * Whether a CUDA runtime of this version has the functions in the form bound here.
     *
     * @param runtime the loaded CUDA runtime's version, as a {@link VersionCodes} code
     * @return whether it is at least {@link #SINCE_VERSION}
     */
    public static boolean isSupportedBy(int runtime) {
        return runtime >= SINCE_VERSION;
    }

    private static MethodHandle handle(String name, FunctionDescriptor descriptor) {
        NativeAccess.check();
        MemorySegment address = SymbolLookup.loaderLookup().or(Linker.nativeLinker().defaultLookup()).find(name)
                .orElseThrow(() -> new NativeLibraryException("the loaded CUDA runtime has no " + name
                        + " (CUDA graphs need CUDA " + VersionCodes.major(SINCE_VERSION) + "."
                        + VersionCodes.minor(SINCE_VERSION) + " or newer)"));
        return Linker.nativeLinker().downcallHandle(address, descriptor);
    }

    private static int call(MethodHandle handle, Object... args) {
        try {
            return (int) handle.invokeWithArguments(args);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable e) {
            throw new AssertionError("should not reach here", e);
        }
    }

    // One holder per function: a handle is made (and its symbol looked up) on first use only. The
    // calls of a launch (cudaGraphLaunch, cudaStreamIsCapturing) use invokeExact; the others, made
    // once per capture or graph, the shorter generic call.

    private static final class BeginCapture {
        static final MethodHandle H = handle("cudaStreamBeginCapture", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
    }

    private static final class EndCapture {
        static final MethodHandle H = handle("cudaStreamEndCapture", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
    }

    private static final class IsCapturing {
        static final MethodHandle H = handle("cudaStreamIsCapturing", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
    }

    private static final class ExchangeMode {
        static final MethodHandle H = handle("cudaThreadExchangeStreamCaptureMode",
                FunctionDescriptor.of(JAVA_INT, ADDRESS));
    }

    private static final class Instantiate {
        static final MethodHandle H = handle("cudaGraphInstantiate",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG));
    }

    private static final class Launch {
        static final MethodHandle H = handle("cudaGraphLaunch", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
    }

    private static final class ExecDestroy {
        static final MethodHandle H = handle("cudaGraphExecDestroy", FunctionDescriptor.of(JAVA_INT, ADDRESS));
    }

    private static final class GraphDestroy {
        static final MethodHandle H = handle("cudaGraphDestroy", FunctionDescriptor.of(JAVA_INT, ADDRESS));
    }

    private static final class RecordWithFlags {
        static final MethodHandle H = handle("cudaEventRecordWithFlags",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT));
    }

    private static final class LaunchHostFunc {
        static final MethodHandle H = handle("cudaLaunchHostFunc",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS));
    }

    /**
     * {@code cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)}
     *
     * @param stream the stream that begins capturing
     * @param mode   one of the {@code CAPTURE_MODE_*} values
     * @return the cudaError_t
     */
    public static int cudaStreamBeginCapture(MemorySegment stream, int mode) {
        return call(BeginCapture.H, stream, mode);
    }

    /**
     * {@code cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)}
     *
     * @param stream the stream the capture began on
     * @param pGraph where the graph (or NULL, on failure) is written
     * @return the cudaError_t
     */
    public static int cudaStreamEndCapture(MemorySegment stream, MemorySegment pGraph) {
        return call(EndCapture.H, stream, pGraph);
    }

    /**
     * {@code cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)}
     *
     * @param stream         the stream
     * @param pCaptureStatus where one of the {@code CAPTURE_STATUS_*} values is written (an int)
     * @return the cudaError_t
     */
    public static int cudaStreamIsCapturing(MemorySegment stream, MemorySegment pCaptureStatus) {
        try {
            return (int) IsCapturing.H.invokeExact(stream, pCaptureStatus);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable e) {
            throw new AssertionError("should not reach here", e);
        }
    }

    /**
     * {@code cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)}
     *
     * @param mode in: the calling thread's new mode; out: its previous mode (an int)
     * @return the cudaError_t
     */
    public static int cudaThreadExchangeStreamCaptureMode(MemorySegment mode) {
        return call(ExchangeMode.H, mode);
    }

    /**
     * {@code cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)}
     *
     * @param pGraphExec where the executable graph is written
     * @param graph      the graph
     * @param flags      cudaGraphInstantiateFlags (0 for none)
     * @return the cudaError_t
     */
    public static int cudaGraphInstantiate(MemorySegment pGraphExec, MemorySegment graph, long flags) {
        return call(Instantiate.H, pGraphExec, graph, flags);
    }

    /**
     * {@code cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)}
     *
     * @param graphExec the executable graph
     * @param stream    the stream it is launched on
     * @return the cudaError_t
     */
    public static int cudaGraphLaunch(MemorySegment graphExec, MemorySegment stream) {
        try {
            return (int) Launch.H.invokeExact(graphExec, stream);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable e) {
            throw new AssertionError("should not reach here", e);
        }
    }

    /**
     * {@code cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)}
     *
     * @param graphExec the executable graph
     * @return the cudaError_t
     */
    public static int cudaGraphExecDestroy(MemorySegment graphExec) {
        return call(ExecDestroy.H, graphExec);
    }

    /**
     * {@code cudaError_t cudaGraphDestroy(cudaGraph_t graph)}
     *
     * @param graph the graph
     * @return the cudaError_t
     */
    public static int cudaGraphDestroy(MemorySegment graph) {
        return call(GraphDestroy.H, graph);
    }

    /**
     * {@code cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)}
     *
     * @param event  the event
     * @param stream the stream
     * @param flags  {@link #EVENT_RECORD_DEFAULT} or {@link #EVENT_RECORD_EXTERNAL}
     * @return the cudaError_t
     */
    public static int cudaEventRecordWithFlags(MemorySegment event, MemorySegment stream, int flags) {
        return call(RecordWithFlags.H, event, stream, flags);
    }

    /**
     * {@code cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)}
     *
     * @param stream   the stream
     * @param fn       a {@code void (*)(void *)} function pointer (an upcall stub or a native function)
     * @param userData its argument
     * @return the cudaError_t
     */
    public static int cudaLaunchHostFunc(MemorySegment stream, MemorySegment fn, MemorySegment userData) {
        return call(LaunchHostFunc.H, stream, fn, userData);
    }
}
