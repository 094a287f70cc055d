package dev.jnccl.cuda;

import static java.lang.foreign.ValueLayout.JAVA_FLOAT;

import dev.jnccl.bindings.cuda.CudaRuntime;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Objects;

/**
 * A CUDA event: a position in a stream that other streams and the host can wait for. Created (and
 * destroyed on {@link #close()}) by jnccl, or {@linkplain #wrap wrapped} without taking ownership.
 */
public final class CudaEvent extends CudaResource implements AutoCloseable {
    private final boolean timing;
    /** The stream of the latest record made through jnccl if that stream was capturing then, else null. */
    private volatile CudaStream capturedOn;

    private CudaEvent(CudaHandle handle, boolean timing) {
        super(handle);
        this.timing = timing;
    }

    /** {@return an event without timing (the cheapest kind, for ordering) on the current device} */
    public static CudaEvent create() {
        return create(false);
    }

    /**
     * {@return an event on the current device; with {@code timing}, {@link #elapsedMillis} works on it}
     *
     * @param timing whether the event records timestamps
     */
    public static CudaEvent create(boolean timing) {
        int flags = timing ? CudaRuntime.cudaEventDefault() : CudaRuntime.cudaEventDisableTiming();
        return new CudaEvent(CudaHandle.create("event", "cudaEventCreateWithFlags",
                out -> CudaRuntime.cudaEventCreateWithFlags(out, flags), CudaRuntime::cudaEventDestroy,
                "cudaEventDestroy"), timing);
    }

    /**
     * Wraps a cudaEvent_t created elsewhere; jnccl never destroys it.
     *
     * @param handle the cudaEvent_t value (not 0)
     * @param device the device it was created on
     * @return the wrapper
     */
    public static CudaEvent wrap(MemorySegment handle, int device) {
        return new CudaEvent(CudaHandle.wrap("event", handle, device, "wrap: event handle is 0"), true);
    }

    /**
     * Wraps a cudaEvent_t given as a raw address. See {@link #wrap(MemorySegment, int)}.
     *
     * @param handle the cudaEvent_t value (not 0)
     * @param device the device it was created on
     * @return the wrapper
     */
    public static CudaEvent wrap(long handle, int device) {
        return wrap(MemorySegment.ofAddress(handle), device);
    }

    /** {@return the cudaEvent_t, owned by this object (or by its creator when wrapped): do not destroy it} */
    public MemorySegment handle() {
        handle.requireOpen("handle", this);
        return handle.segment();
    }

    /**
     * Records this event at the current end of {@code stream}.
     *
     * @param stream the stream, on the event's device
     */
    public void record(CudaStream stream) {
        Objects.requireNonNull(stream, "record: stream is null");
        stream.record(this);
    }

    /**
     * Whether the work before the most recent record has completed (true if never recorded).
     *
     * @return whether it completed
     * @throws IllegalStateException when this event is closed, its latest record was made in a
     *                               {@link CudaGraph} capture still in progress, or the calling
     *                               thread is inside {@link CudaGraph#capture}
     */
    public boolean isComplete() {
        refuseDuringCapture("isComplete");
        return handle.query("isComplete", this, CudaRuntime::cudaEventQuery, "cudaEventQuery");
    }

    /** Called by {@link CudaStream#record} after each record: the capturing stream, or null. */
    void recordedOn(CudaStream capturing) {
        if (capturing != null || capturedOn != null) {
            capturedOn = capturing;
        }
    }

    /** {@return whether the most recent record was made on a stream that is still capturing} */
    boolean recordedInActiveCapture() {
        CudaStream capturing = capturedOn;
        return capturing != null && !capturing.isClosed() && capturing.isCapturing();
    }

    /**
     * Refuses a wait or query that CUDA forbids: from the capturing thread, or of a record made in a
     * capture. Such a record belongs to the graph: while the capture runs it has not happened, and
     * once the capture has ended no launch of the graph records the event for the host either (CUDA
     * answers cudaEventQuery with invalid argument until the event is recorded again outside).
     */
    private void refuseDuringCapture(String operation) {
        handle.requireOpen(operation, this);
        CudaStream capturing = capturedOn;
        if (capturing == null && !CudaGraph.anyCapture()) {
            return;
        }
        CudaGraph.refuseOnCapturingThread(operation, this);
        if (capturing == null) {
            return;
        }
        if (!capturing.isClosed() && capturing.isCapturing()) {
            throw new IllegalStateException(operation + ": " + this + " was last recorded on " + capturing
                    + " while it captured a CUDA graph: that record completes only when the graph is launched;"
                    + " record the event again outside the capture (or wait on the stream the graph is launched on)");
        }
        throw new IllegalStateException(operation + ": " + this + " was last recorded inside a CUDA graph capture,"
                + " which has ended: launches of the graph do not record it for the host; record the event again"
                + " outside the capture (or wait on the stream the graph is launched on)");
    }

    /**
     * Blocks until the most recent record has completed. The wait polls the event (it parks
     * between polls, it does not spin), so an interrupt ends it.
     *
     * @throws dev.jnccl.JncclInterruptedException when the thread is interrupted first (the
     *                                             interrupt status stays set; the work is not cancelled)
     * @throws IllegalStateException               when this event is closed
     */
    public void synchronize() {
        refuseDuringCapture("synchronize");
        handle.await("synchronize", this, CudaRuntime::cudaEventQuery, "cudaEventQuery");
    }

    /**
     * Milliseconds between {@code start} and this event (both recorded, completed, created with timing).
     *
     * @param start the earlier event
     * @return the elapsed time in milliseconds
     */
    public float elapsedMillis(CudaEvent start) {
        handle.requireOpen("elapsedMillis", this);
        Objects.requireNonNull(start, "elapsedMillis: start is null");
        if (!timing || !start.timing) {
            throw new IllegalStateException("elapsedMillis: " + (timing ? start : this) + " was created without timing");
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment ms = arena.allocate(JAVA_FLOAT);
            CudaCalls.check(CudaRuntime.cudaEventElapsedTime(ms, start.handle(), handle.segment()),
                    "cudaEventElapsedTime", handle.device());
            return ms.get(JAVA_FLOAT, 0);
        }
    }

    /** Destroys an owned event; idempotent. */
    @Override
    public void close() {
        handle.close();
    }

    @Override
    public String toString() {
        return handle.describe("CudaEvent", "");
    }
}
