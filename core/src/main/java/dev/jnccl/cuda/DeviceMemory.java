package dev.jnccl.cuda;

import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.internal.Native;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Device memory: allocated with cudaMalloc (and freed on {@link #close()}), or a pointer from
 * another library {@linkplain #wrap wrapped} without taking ownership. Copies to and from host
 * memory take any {@link MemorySegment}: native segments go straight to cudaMemcpy, heap segments
 * through a temporary native buffer.
 */
public final class DeviceMemory implements AutoCloseable {
    private final long address;
    private final long bytes;
    private final int device;
    private final boolean owned;
    /** Set once by the first close(): the compare-and-set makes two racing closes destroy the handle once. */
    private final AtomicBoolean closed = new AtomicBoolean();

    private DeviceMemory(long address, long bytes, int device, boolean owned) {
        this.address = address;
        this.bytes = bytes;
        this.device = device;
        this.owned = owned;
    }

    /**
     * Allocates {@code bytes} on the calling thread's current device.
     *
     * @param bytes the size in bytes (not negative)
     * @return the memory, to be closed by the caller
     */
    public static DeviceMemory allocate(long bytes) {
        if (bytes <= 0) {
            throw new IllegalArgumentException("allocate: bytes " + bytes + " must be positive");
        }
        Native.libraries();
        int device = Native.currentDevice();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ValueLayout.ADDRESS);
            Native.checkCuda(CudaRuntime.cudaMalloc(out, bytes), "cudaMalloc(" + bytes + " bytes)", device);
            return new DeviceMemory(out.get(ValueLayout.ADDRESS, 0).address(), bytes, device, true);
        }
    }

    /**
     * Allocates room for {@code count} elements of {@code dtype} on the current device.
     *
     * @param dtype the element type
     * @param count the number of elements (not negative)
     * @return the memory, to be closed by the caller
     */
    public static DeviceMemory allocate(DType dtype, long count) {
        Objects.requireNonNull(dtype, "allocate: dtype is null");
        if (count <= 0) {
            throw new IllegalArgumentException("allocate: count " + count + " must be positive");
        }
        return allocate(Math.multiplyExact(count, dtype.size()));
    }

    /**
     * Wraps device memory allocated elsewhere; jnccl never frees it.
     *
     * @param address device pointer (not 0)
     * @param bytes   size of the allocation
     * @param device  the device it lives on
     * @return the wrapper
     */
    public static DeviceMemory wrap(long address, long bytes, int device) {
        if (address == 0) {
            throw new IllegalArgumentException("wrap: address is 0");
        }
        if (bytes <= 0) {
            throw new IllegalArgumentException("wrap: bytes " + bytes + " must be positive");
        }
        if (device < 0) {
            throw new IllegalArgumentException("wrap: device " + device + " is negative");
        }
        Native.libraries();
        return new DeviceMemory(address, bytes, device, false);
    }

    /** {@return the device address} */
    public long address() {
        requireOpen("address");
        return address;
    }

    /**
     * The size in bytes.
     *
     * @return the size in bytes
     */
    public long bytes() {
        return bytes;
    }

    /**
     * The device the memory lives on.
     *
     * @return the device
     */
    public int device() {
        return device;
    }

    /**
     * Whether this object owns (and will free) the memory.
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
     * This memory as a tensor of as many {@code dtype} elements as fit.
     *
     * @param dtype the element type
     * @return a tensor view of the whole memory
     */
    public DeviceTensor tensor(DType dtype) {
        Objects.requireNonNull(dtype, "tensor: dtype is null");
        requireOpen("tensor");
        return new DeviceTensor(address, dtype, bytes / dtype.size());
    }

    /**
     * Copies all of {@code source} to the start of this memory, synchronously.
     *
     * @param source host memory to copy
     */
    public void copyFromHost(MemorySegment source) {
        copyFromHost(source, 0);
    }

    /**
     * Copies all of {@code source} to {@code offset} bytes into this memory, synchronously.
     *
     * @param source host memory to copy
     * @param offset the byte offset into this memory
     */
    public void copyFromHost(MemorySegment source, long offset) {
        Objects.requireNonNull(source, "copyFromHost: source is null");
        requireOpen("copyFromHost");
        checkRange("copyFromHost", offset, source.byteSize());
        if (source.byteSize() == 0) {
            return;
        }
        if (source.isNative()) {
            memcpy(MemorySegment.ofAddress(address + offset), source, source.byteSize(),
                    CudaRuntime.cudaMemcpyHostToDevice());
            return;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment staging = arena.allocate(source.byteSize(), 16);
            staging.copyFrom(source);
            memcpy(MemorySegment.ofAddress(address + offset), staging, source.byteSize(),
                    CudaRuntime.cudaMemcpyHostToDevice());
        }
    }

    /**
     * Fills all of {@code target} from the start of this memory, synchronously.
     *
     * @param target host memory to fill
     */
    public void copyToHost(MemorySegment target) {
        copyToHost(target, 0);
    }

    /**
     * Fills all of {@code target} from {@code offset} bytes into this memory, synchronously.
     *
     * @param target host memory to fill
     * @param offset the byte offset into this memory
     */
    public void copyToHost(MemorySegment target, long offset) {
        Objects.requireNonNull(target, "copyToHost: target is null");
        requireOpen("copyToHost");
        checkRange("copyToHost", offset, target.byteSize());
        if (target.byteSize() == 0) {
            return;
        }
        if (target.isReadOnly()) {
            throw new IllegalArgumentException("copyToHost: target segment is read-only");
        }
        if (target.isNative()) {
            memcpy(target, MemorySegment.ofAddress(address + offset), target.byteSize(),
                    CudaRuntime.cudaMemcpyDeviceToHost());
            return;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment staging = arena.allocate(target.byteSize(), 16);
            memcpy(staging, MemorySegment.ofAddress(address + offset), target.byteSize(),
                    CudaRuntime.cudaMemcpyDeviceToHost());
            target.copyFrom(staging);
        }
    }

    /**
     * Sets every byte to {@code value}, in order on {@code stream}.
     *
     * @param value the byte value
     * @param stream the stream the fill is ordered on
     */
    public void fill(byte value, CudaStream stream) {
        Objects.requireNonNull(stream, "fill: stream is null");
        requireOpen("fill");
        Native.checkCuda(CudaRuntime.cudaMemsetAsync(MemorySegment.ofAddress(address), value, bytes, stream.handle()),
                "cudaMemsetAsync", device);
    }

    private void memcpy(MemorySegment dst, MemorySegment src, long count, int kind) {
        Native.checkCuda(CudaRuntime.cudaMemcpy(dst, src, count, kind), "cudaMemcpy", device);
    }

    private void checkRange(String operation, long offset, long length) {
        if (offset < 0 || length < 0 || offset > bytes || length > bytes - offset) {
            throw new IllegalArgumentException(operation + ": " + length + " bytes at offset " + offset
                    + " do not fit in " + bytes + " bytes of device memory");
        }
    }

    private void requireOpen(String operation) {
        if (closed.get()) {
            throw new IllegalStateException(operation + ": " + this + " is closed");
        }
    }

    /** Frees owned memory; idempotent. Make sure no stream still uses it. */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        if (owned) {
            Native.checkCuda(CudaRuntime.cudaFree(MemorySegment.ofAddress(address)), "cudaFree", device);
        }
    }

    @Override
    public String toString() {
        return "DeviceMemory[0x" + Long.toHexString(address) + ", " + bytes + " bytes, device " + device
                + (owned ? "" : ", wrapped") + (closed.get() ? ", closed" : "") + "]";
    }
}
