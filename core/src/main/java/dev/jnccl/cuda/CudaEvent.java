package dev.jnccl.cuda;

import static java.lang.foreign.ValueLayout.JAVA_FLOAT;

import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.internal.Native;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A CUDA event: a position in a stream that other streams and the host can wait for. Created (and
 * destroyed on {@link #close()}) by jnccl, or {@linkplain #wrap wrapped} without taking ownership.
 */
public final class CudaEvent implements AutoCloseable {
    private final MemorySegment handle;
    private final int device;
    private final boolean owned;
    private final boolean timing;
    /** Set once by the first close(): the compare-and-set makes two racing closes destroy the handle once. */
    private final AtomicBoolean closed = new AtomicBoolean();

    private CudaEvent(MemorySegment handle, int device, boolean owned, boolean timing) {
        this.handle = handle;
        this.device = device;
        this.owned = owned;
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
        Native.libraries();
        int device = Native.currentDevice();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ValueLayout.ADDRESS);
            int flags = timing ? CudaRuntime.cudaEventDefault() : CudaRuntime.cudaEventDisableTiming();
            Native.checkCuda(CudaRuntime.cudaEventCreateWithFlags(out, flags), "cudaEventCreateWithFlags", device);
            return new CudaEvent(out.get(ValueLayout.ADDRESS, 0), device, true, timing);
        }
    }

    /**
     * Wraps a cudaEvent_t created elsewhere; jnccl never destroys it.
     *
     * @param handle the cudaEvent_t value (not 0)
     * @param device the device it was created on
     * @return the wrapper
     */
    public static CudaEvent wrap(MemorySegment handle, int device) {
        Objects.requireNonNull(handle, "wrap: handle is null");
        if (handle.equals(MemorySegment.NULL)) {
            throw new IllegalArgumentException("wrap: event handle is 0");
        }
        if (device < 0) {
            throw new IllegalArgumentException("wrap: device " + device + " is negative");
        }
        Native.libraries();
        return new CudaEvent(MemorySegment.ofAddress(handle.address()), device, false, true);
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

    /** {@return the cudaEvent_t} */
    public MemorySegment handle() {
        requireOpen("handle");
        return handle;
    }

    /**
     * The device the event was created on.
     *
     * @return the device
     */
    public int device() {
        return device;
    }

    /**
     * Whether this object owns (and will destroy) the event.
     *
     * @return whether it is owned
     */
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

    /**
     * Records this event at the current end of {@code stream}.
     *
     * @param stream the stream, on the event's device
     */
    public void record(CudaStream stream) {
        Objects.requireNonNull(stream, "record: stream is null");
        stream.record(this);
    }

    /** {@return whether the work before the most recent record has completed (true if never recorded)} */
    public boolean isComplete() {
        requireOpen("isComplete");
        int code = CudaRuntime.cudaEventQuery(handle);
        if (code == CudaRuntime.cudaErrorNotReady()) {
            return false;
        }
        Native.checkCuda(code, "cudaEventQuery", device);
        return true;
    }

    /** Blocks until the most recent record has completed. */
    public void synchronize() {
        requireOpen("synchronize");
        Native.checkCuda(CudaRuntime.cudaEventSynchronize(handle), "cudaEventSynchronize", device);
    }

    /**
     * Milliseconds between {@code start} and this event (both recorded, completed, created with timing).
     *
     * @param start the earlier event
     * @return the elapsed time in milliseconds
     */
    public float elapsedMillis(CudaEvent start) {
        requireOpen("elapsedMillis");
        Objects.requireNonNull(start, "elapsedMillis: start is null");
        if (!timing || !start.timing) {
            throw new IllegalStateException("elapsedMillis: " + (timing ? start : this) + " was created without timing");
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment ms = arena.allocate(JAVA_FLOAT);
            Native.checkCuda(CudaRuntime.cudaEventElapsedTime(ms, start.handle(), handle), "cudaEventElapsedTime",
                    device);
            return ms.get(JAVA_FLOAT, 0);
        }
    }

    void requireOpen(String operation) {
        if (closed.get()) {
            throw new IllegalStateException(operation + ": event " + this + " is closed");
        }
    }

    /** Destroys an owned event; idempotent. */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        if (owned) {
            Native.checkCuda(CudaRuntime.cudaEventDestroy(handle), "cudaEventDestroy", device);
        }
    }

    @Override
    public String toString() {
        return "CudaEvent[0x" + Long.toHexString(handle.address()) + ", device " + device + (owned ? "" : ", wrapped")
                + (closed.get() ? ", closed" : "") + "]";
    }
}
