package dev.jnccl.cuda;

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

    /** Wraps a cudaStream_t given as a raw address. See {@link #wrap(MemorySegment, int)}. */
    public static CudaStream wrap(long handle, int device) {
        return wrap(MemorySegment.ofAddress(handle), device);
    }

    /** The cudaStream_t. */
    public MemorySegment handle() {
        requireOpen("handle");
        return handle;
    }

    public int device() {
        return device;
    }

    /** Whether this object owns (and will destroy) the stream. */
    public boolean isOwned() {
        return owned;
    }

    public boolean isClosed() {
        return closed.get();
    }

    /** Blocks until all work enqueued on the stream is done. */
    public void synchronize() {
        requireOpen("synchronize");
        Native.checkCuda(CudaRuntime.cudaStreamSynchronize(handle), "cudaStreamSynchronize", device);
    }

    /** Whether all work enqueued so far is done (cudaStreamQuery). */
    public boolean isIdle() {
        requireOpen("isIdle");
        int code = CudaRuntime.cudaStreamQuery(handle);
        if (code == CudaRuntime.cudaErrorNotReady()) {
            return false;
        }
        Native.checkCuda(code, "cudaStreamQuery", device);
        return true;
    }

    /** Makes later work on this stream wait until {@code event}'s most recent record has completed. */
    public void waitFor(CudaEvent event) {
        requireOpen("waitFor");
        Objects.requireNonNull(event, "waitFor: event is null");
        Native.checkCuda(CudaRuntime.cudaStreamWaitEvent(handle, event.handle(), 0), "cudaStreamWaitEvent", device);
    }

    /** Records {@code event} at the current end of this stream. */
    public void record(CudaEvent event) {
        requireOpen("record");
        Objects.requireNonNull(event, "record: event is null");
        Native.checkCuda(CudaRuntime.cudaEventRecord(event.handle(), handle), "cudaEventRecord", device);
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
