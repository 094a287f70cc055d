package dev.jnccl.cuda;

import dev.jnccl.DeviceTensor;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.internal.Native;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A CUDA stream: either created (and destroyed on {@link #close()}) by jnccl, or a handle created by
 * another library and {@linkplain #wrap wrapped} without taking ownership.
 */
public final class CudaStream implements AutoCloseable {
    private final MemorySegment handle;
    private final int device;
    private final boolean owned;
    /** Set once by the first close(): the compare-and-set makes two racing closes destroy the handle once. */
    private final AtomicBoolean closed = new AtomicBoolean();

    private CudaStream(MemorySegment handle, int device, boolean owned) {
        this.handle = handle;
        this.device = device;
        this.owned = owned;
    }

    /**
     * Creates a non-blocking stream (it does not synchronize with the legacy default stream) on the
     * calling thread's current device.
     *
     * @return the new stream, to be closed by the caller
     */
    public static CudaStream create() {
        Native.libraries();
        int device = Native.currentDevice();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ValueLayout.ADDRESS);
            Native.checkCuda(CudaRuntime.cudaStreamCreateWithFlags(out, CudaRuntime.cudaStreamNonBlocking()),
                    "cudaStreamCreateWithFlags", device);
            return new CudaStream(out.get(ValueLayout.ADDRESS, 0), device, true);
        }
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
        Objects.requireNonNull(handle, "wrap: handle is null");
        if (handle.equals(MemorySegment.NULL)) {
            throw new IllegalArgumentException("wrap: stream handle is 0 (the legacy default stream); pass a created stream");
        }
        if (device < 0) {
            throw new IllegalArgumentException("wrap: device " + device + " is negative");
        }
        Native.libraries();
        return new CudaStream(MemorySegment.ofAddress(handle.address()), device, false);
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
     * The cudaStream_t.
     *
     * @return whether every rank finished within {@code timeout}
     */
    public MemorySegment handle() {
        requireOpen("handle");
        return handle;
    }

    /**
     * The device the stream was created on.
     *
     * @return the device
     */
    public int device() {
        return device;
    }

    /** {@return whether this object owns (and will destroy) the stream} */
    public boolean isOwned() {
        return owned;
    }

    /**
     * Whether {@link #close()} has run.
     *
     * @return whether it is closed
     */
    public boolean isClosed() {
        return closed.get();
    }

    /** Blocks until all work enqueued on the stream is done. */
    public void synchronize() {
        requireOpen("synchronize");
        Native.checkCuda(CudaRuntime.cudaStreamSynchronize(handle), "cudaStreamSynchronize", device);
    }

    /** {@return whether all work enqueued so far is done (cudaStreamQuery)} */
    public boolean isIdle() {
        requireOpen("isIdle");
        int code = CudaRuntime.cudaStreamQuery(handle);
        if (code == CudaRuntime.cudaErrorNotReady()) {
            return false;
        }
        Native.checkCuda(code, "cudaStreamQuery", device);
        return true;
    }

    /**
     * Makes later work on this stream wait until {@code event}'s most recent record has completed.
     *
     * @param event the event to wait for
     */
    public void waitFor(CudaEvent event) {
        requireOpen("waitFor");
        Objects.requireNonNull(event, "waitFor: event is null");
        Native.checkCuda(CudaRuntime.cudaStreamWaitEvent(handle, event.handle(), 0), "cudaStreamWaitEvent", device);
    }

    /**
     * Records {@code event} at the current end of this stream.
     *
     * @param event the event to record
     */
    public void record(CudaEvent event) {
        requireOpen("record");
        Objects.requireNonNull(event, "record: event is null");
        Native.checkCuda(CudaRuntime.cudaEventRecord(event.handle(), handle), "cudaEventRecord", device);
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
     * @throws IllegalStateException    when this stream is closed
     * @throws CudaException            when CUDA refuses the copy
     */
    public void copyAsync(DeviceTensor from, DeviceTensor to) {
        Objects.requireNonNull(from, "copyAsync: from is null");
        Objects.requireNonNull(to, "copyAsync: to is null");
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
        requireOpen("copyAsync");
        if (bytes == 0) {
            return;
        }
        Native.checkCuda(CudaRuntime.cudaMemcpyAsync(MemorySegment.ofAddress(to.address()),
                MemorySegment.ofAddress(from.address()), bytes, CudaRuntime.cudaMemcpyDefault(), handle),
                "cudaMemcpyAsync", device);
    }

    void requireOpen(String operation) {
        if (closed.get()) {
            throw new IllegalStateException(operation + ": stream " + this + " is closed");
        }
    }

    /** Destroys an owned stream (pending work still completes, as in CUDA); idempotent. */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        if (owned) {
            Native.checkCuda(CudaRuntime.cudaStreamDestroy(handle), "cudaStreamDestroy", device);
        }
    }

    @Override
    public String toString() {
        return "CudaStream[0x" + Long.toHexString(handle.address()) + ", device " + device + (owned ? "" : ", wrapped")
                + (closed.get() ? ", closed" : "") + "]";
    }
}
