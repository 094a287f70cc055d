package dev.jnccl.cuda;

import dev.jnccl.JncclInterruptedException;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.internal.Backoff;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.ToIntFunction;

/**
 * The life of one CUDA handle (a stream, an event, a device allocation) shared by
 * {@link CudaStream}, {@link CudaEvent} and {@link DeviceMemory}: creation through an output
 * slot, wrapping a foreign handle without ownership, the closed check of every call, a close
 * that destroys an owned handle exactly once, and the waits for it (polled, so that they end when
 * the thread is interrupted).
 */
final class CudaHandle {
    /** What the handle is, in messages: "stream", "event", "device memory". */
    private final String kind;
    private final MemorySegment segment;
    private final int device;
    private final boolean owned;
    /** How an owned handle is destroyed (cudaStreamDestroy, ...); its name is {@link #destroyName}. */
    private final ToIntFunction<MemorySegment> destroy;
    private final String destroyName;
    /** Set once by the first close(): the compare-and-set makes two racing closes destroy the handle once. */
    private final AtomicBoolean closed = new AtomicBoolean();

    private CudaHandle(String kind, MemorySegment segment, int device, boolean owned, ToIntFunction<MemorySegment> destroy,
                       String destroyName) {
        this.kind = kind;
        this.segment = segment;
        this.device = device;
        this.owned = owned;
        this.destroy = destroy;
        this.destroyName = destroyName;
    }

    /**
     * Creates an owned handle on the calling thread's current device: {@code create} writes it into
     * the slot it is given, {@code function} (with its arguments, for the message) names the call.
     */
    static CudaHandle create(String kind, String function, ToIntFunction<MemorySegment> create,
                             ToIntFunction<MemorySegment> destroy, String destroyName) {
        CudaCalls.libraries();
        int device = Cuda.currentDevice();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ValueLayout.ADDRESS);
            CudaCalls.check(create.applyAsInt(out), function, device);
            return new CudaHandle(kind, MemorySegment.ofAddress(out.get(ValueLayout.ADDRESS, 0).address()), device,
                    true, destroy, destroyName);
        }
    }

    /** An owned handle that needs no native call to create or destroy (a zero-byte allocation at address 0). */
    static CudaHandle empty(String kind, int device) {
        return new CudaHandle(kind, MemorySegment.NULL, device, true, handle -> 0, "none");
    }

    /**
     * Wraps a handle created elsewhere; it is never destroyed.
     *
     * @param zeroMessage the message when {@code handle} is 0 (why 0 is refused)
     */
    static CudaHandle wrap(String kind, MemorySegment handle, int device, String zeroMessage) {
        Objects.requireNonNull(handle, "wrap: handle is null");
        if (handle.equals(MemorySegment.NULL)) {
            throw new IllegalArgumentException(zeroMessage);
        }
        if (device < 0) {
            throw new IllegalArgumentException("wrap: device " + device + " is negative");
        }
        CudaCalls.libraries();
        return new CudaHandle(kind, MemorySegment.ofAddress(handle.address()), device, false, null, null);
    }

    /** The handle, unchecked (for messages and the owner's own use after {@link #requireOpen}). */
    MemorySegment segment() {
        return segment;
    }

    int device() {
        return device;
    }

    boolean isOwned() {
        return owned;
    }

    boolean isClosed() {
        return closed.get();
    }

    /** @throws IllegalStateException naming the call and {@code owner} once closed */
    void requireOpen(String operation, Object owner) {
        if (closed.get()) {
            throw new IllegalStateException(operation + ": " + kind + " " + owner + " is closed");
        }
    }

    /**
     * One query ({@code cudaStreamQuery}, {@code cudaEventQuery}): true when the work is done,
     * false when not ready, a {@link CudaException} for any other result.
     */
    boolean query(String operation, Object owner, ToIntFunction<MemorySegment> query, String function) {
        requireOpen(operation, owner);
        int code = query.applyAsInt(segment);
        if (code == CudaRuntime.cudaErrorNotReady()) {
            return false;
        }
        CudaCalls.check(code, function, device);
        return true;
    }

    /**
     * Waits until {@code query} says done, polling with a backoff that parks instead of blocking
     * in CUDA (cudaStreamSynchronize / cudaEventSynchronize cannot be interrupted): an interrupt
     * ends the wait at once, with the interrupt status kept.
     *
     * @throws JncclInterruptedException when the thread is interrupted before the work is done
     */
    void await(String operation, Object owner, ToIntFunction<MemorySegment> query, String function) {
        long spins = 0;
        while (!query(operation, owner, query, function)) {
            if (Backoff.pauseOrInterrupted(spins++)) {
                throw new JncclInterruptedException(operation + ": the wait for " + kind + " " + owner
                        + " ended because the thread was interrupted; the work enqueued on the GPU was not"
                        + " cancelled and may still run", new InterruptedException(operation + " interrupted"));
            }
        }
    }

    /** Marks the handle closed and destroys it if owned; only the first call does anything. */
    void close() {
        if (closed.compareAndSet(false, true) && owned) {
            CudaCalls.check(destroy.applyAsInt(segment), destroyName, device);
        }
    }

    /** {@return the text of the owner's {@code toString}: {@code Name[0x..., device d, wrapped, closed]}} */
    String describe(String name, String details) {
        return name + "[0x" + Long.toHexString(segment.address()) + details + ", device " + device
                + (owned ? "" : ", wrapped") + (closed.get() ? ", closed" : "") + "]";
    }
}
