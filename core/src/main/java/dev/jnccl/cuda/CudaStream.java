package dev.jnccl.cuda;

import dev.jnccl.DeviceTensor;
import dev.jnccl.bindings.CudaGraphs;
import dev.jnccl.bindings.cuda.CudaRuntime;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;

/**
 * A CUDA stream: either created (and destroyed on {@link #close()}) by jnccl, or a handle created by
 * another library and {@linkplain #wrap wrapped} without taking ownership.
 */
public final class CudaStream extends CudaResource implements AutoCloseable {
    /**
     * Each thread's slot for cudaStreamIsCapturing's answer: every {@link #synchronize()} asks it,
     * and a loop that synchronizes allocates nothing for it (freed with the thread).
     */
    private static final ThreadLocal<MemorySegment> CAPTURE_STATUS =
            ThreadLocal.withInitial(() -> Arena.ofAuto().allocate(ValueLayout.JAVA_INT));

    private CudaStream(CudaHandle handle) {
        super(handle);
    }

    /**
     * Creates a non-blocking stream (it does not synchronize with the legacy default stream) on the
     * calling thread's current device.
     *
     * @return the new stream, to be closed by the caller
     */
    public static CudaStream create() {
        return new CudaStream(CudaHandle.create("stream", "cudaStreamCreateWithFlags",
                out -> CudaRuntime.cudaStreamCreateWithFlags(out, CudaRuntime.cudaStreamNonBlocking()),
                CudaRuntime::cudaStreamDestroy, "cudaStreamDestroy"));
    }

    /**
     * Wraps a cudaStream_t created elsewhere (JCuda, JavaCPP, a kernel launcher...). jnccl never
     * destroys it; {@link #close()} only stops this object from being used. The legacy default
     * stream (handle 0) is not accepted: jnccl orders work with explicit streams.
     *
     * @param handle the cudaStream_t value
     * @param device the device the stream belongs to
     * @return the wrapper
     */
    public static CudaStream wrap(MemorySegment handle, int device) {
        return new CudaStream(CudaHandle.wrap("stream", handle, device,
                "wrap: stream handle is 0 (the legacy default stream); pass a created stream"));
    }

    /**
     * Wraps a cudaStream_t given as a raw address. See {@link #wrap(MemorySegment, int)}.
     *
     * @param handle the cudaStream_t value (not 0)
     * @param device the device it was created on
     * @return the wrapper
     */
    public static CudaStream wrap(long handle, int device) {
        return wrap(MemorySegment.ofAddress(handle), device);
    }

    /**
     * The cudaStream_t, for passing to another library (a kernel launch, JCuda, ...). The segment
     * is the handle's value as an address (size 0); it stays owned by this object (or, for a
     * {@linkplain #wrap wrapped} stream, by whoever created it): do not destroy it, and do not use
     * it after {@link #close()}.
     *
     * @return the cudaStream_t as a zero-length segment
     * @throws IllegalStateException when this stream is closed
     */
    public MemorySegment handle() {
        handle.requireOpen("handle", this);
        return handle.segment();
    }

    /**
     * Blocks until all work enqueued on the stream is done. The wait polls the stream (it parks
     * between polls, it does not spin), so an interrupt ends it.
     *
     * @throws dev.jnccl.JncclInterruptedException when the thread is interrupted first (the
     *                                             interrupt status stays set; the work is not cancelled)
     * @throws IllegalStateException               when this stream is closed
     * @throws CudaException                       when CUDA reports an error of the stream's work
     */
    public void synchronize() {
        refuseDuringCapture("synchronize");
        handle.await("synchronize", this, CudaRuntime::cudaStreamQuery, "cudaStreamQuery");
    }

    /**
     * Whether all work enqueued so far is done (cudaStreamQuery).
     *
     * @return whether the stream is idle
     * @throws IllegalStateException when this stream is closed, capturing a {@link CudaGraph}, or the
     *                               calling thread is inside {@link CudaGraph#capture}
     */
    public boolean isIdle() {
        refuseDuringCapture("isIdle");
        return handle.query("isIdle", this, CudaRuntime::cudaStreamQuery, "cudaStreamQuery");
    }

    /**
     * Whether the stream is capturing a CUDA graph (cudaStreamIsCapturing): work enqueued on it is
     * then recorded into the graph instead of run. Also true for a capture that an illegal call
     * invalidated and that was not ended yet.
     *
     * @return whether the stream is in a capture
     * @throws IllegalStateException when this stream is closed
     */
    public boolean isCapturing() {
        handle.requireOpen("isCapturing", this);
        MemorySegment status = CAPTURE_STATUS.get();
        CudaCalls.check(CudaGraphs.cudaStreamIsCapturing(handle.segment(), status), "cudaStreamIsCapturing",
                handle.device());
        return status.get(ValueLayout.JAVA_INT, 0) != CudaGraphs.CAPTURE_STATUS_NONE;
    }

    /**
     * Refuses a wait for or query of this stream's work while it captures (the work does not run
     * until a launch, and CUDA would invalidate the capture), or from the capturing thread.
     */
    private void refuseDuringCapture(String operation) {
        handle.requireOpen(operation, this);
        if (!CudaGraph.anyCapture()) {
            return;
        }
        CudaGraph.refuseOnCapturingThread(operation, this);
        if (isCapturing()) {
            throw new IllegalStateException(operation + ": " + this + " is capturing a CUDA graph (CudaGraph.capture):"
                    + " its work runs only when the graph is launched, and CUDA would invalidate the capture;"
                    + " wait after the capture, or after launching the graph");
        }
    }

    /**
     * Makes later work on this stream wait until {@code event}'s most recent record has completed.
     *
     * <p>While this stream captures a CUDA graph ({@link CudaGraph#capture}): an event recorded in
     * the capture orders the captured work (a stream not capturing yet joins the capture through
     * it); an event whose last record was made outside any capture becomes an external wait node
     * ({@code cudaEventWaitExternal}): each launch of the graph waits for the event's most recent
     * record at that time, where CUDA would refuse a plain wait ({@code cudaErrorStreamCaptureIsolation}).
     *
     * @param event the event to wait for
     */
    public void waitFor(CudaEvent event) {
        handle.requireOpen("waitFor", this);
        Objects.requireNonNull(event, "waitFor: event is null");
        MemorySegment eventHandle = event.handle();
        // Only while jnccl captures somewhere: the hot path pays one volatile read.
        int flags = CudaGraph.anyCapture() && !event.recordedInActiveCapture() && isCapturing()
                ? CudaGraphs.EVENT_WAIT_EXTERNAL : CudaGraphs.EVENT_WAIT_DEFAULT;
        CudaCalls.check(CudaRuntime.cudaStreamWaitEvent(handle.segment(), eventHandle, flags), "cudaStreamWaitEvent",
                handle.device());
    }

    /**
     * Records {@code event} at the current end of this stream.
     *
     * @param event the event to record
     */
    public void record(CudaEvent event) {
        handle.requireOpen("record", this);
        Objects.requireNonNull(event, "record: event is null");
        CudaCalls.check(CudaRuntime.cudaEventRecord(event.handle(), handle.segment()), "cudaEventRecord",
                handle.device());
        // Only while jnccl captures somewhere: the hot path pays one volatile read.
        event.recordedOn(CudaGraph.anyCapture() && isCapturing() ? this : null);
    }

    /**
     * Copies {@code from} into {@code to}, in order on this stream (cudaMemcpyAsync): returns once
     * the copy is enqueued; work enqueued on this stream later sees the copied data. The tensors
     * may live on different devices: a peer copy works whether or not peer access is enabled
     * ({@link Cuda#enablePeerAccess}); enabled, CUDA copies directly between the GPUs. A copy moves
     * bytes: the element types may differ (as in send/recv), the byte sizes must be equal. An empty
     * copy enqueues nothing.
     *
     * @param from the source tensor (device memory)
     * @param to   the destination tensor (device memory, same byte size)
     * @throws IllegalArgumentException when the byte sizes differ or the two ranges overlap, before any native call
     * @throws IllegalStateException    when this stream is closed, or a tensor's {@link DeviceMemory} was closed
     * @throws CudaException            when CUDA refuses the copy
     */
    public void copyAsync(DeviceTensor from, DeviceTensor to) {
        requireOpen("from", from);
        requireOpen("to", to);
        long bytes = from.bytes();
        if (bytes != to.bytes()) {
            throw new IllegalArgumentException("copyAsync: from has " + bytes + " bytes (" + from.dtype() + " x "
                    + from.count() + ") but to has " + to.bytes() + " bytes (" + to.dtype() + " x " + to.count()
                    + ")");
        }
        if (bytes > 0 && from.address() < to.address() + bytes && to.address() < from.address() + bytes) {
            throw new IllegalArgumentException("copyAsync: from [0x" + Long.toHexString(from.address()) + ", +"
                    + bytes + ") and to [0x" + Long.toHexString(to.address()) + ", +" + bytes + ") overlap");
        }
        handle.requireOpen("copyAsync", this);
        if (bytes == 0) {
            return;
        }
        CudaCalls.check(CudaRuntime.cudaMemcpyAsync(MemorySegment.ofAddress(to.address()),
                MemorySegment.ofAddress(from.address()), bytes, CudaRuntime.cudaMemcpyDefault(), handle.segment()),
                "cudaMemcpyAsync", handle.device());
    }

    /**
     * Checks that a tensor of {@link #copyAsync} is given and its memory, when known, is open, so a
     * freed buffer gives an exception naming the argument instead of a CUDA error. The
     * communicator's argument checks in {@code dev.jnccl} say the same in the same words.
     */
    private static void requireOpen(String argument, DeviceTensor tensor) {
        if (tensor == null) {
            throw new NullPointerException("copyAsync: " + argument + " is null");
        }
        DeviceMemory memory = tensor.memory();
        if (memory != null && memory.isClosed()) {
            throw new IllegalStateException("copyAsync: " + argument + " " + tensor + " views " + memory
                    + (memory.isOwned() ? ", which was closed: its memory was freed"
                            : ", which was closed: jnccl no longer uses the wrapped pointer"));
        }
    }

    /** Destroys an owned stream (pending work still completes, as in CUDA); idempotent. */
    @Override
    public void close() {
        handle.close();
    }

    @Override
    public String toString() {
        return handle.describe("CudaStream", "");
    }
}
