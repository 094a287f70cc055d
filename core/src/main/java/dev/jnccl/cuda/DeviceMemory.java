package dev.jnccl.cuda;

import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.NcclException;
import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.bindings.VersionCodes;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.internal.Native;
import dev.jnccl.internal.Pins;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Objects;
import java.util.function.ToIntFunction;

/**
 * Device memory: allocated with cudaMalloc (and freed on {@link #close()}), with NCCL's allocator
 * ({@link #allocateForNccl}), or a pointer from another library {@linkplain #wrap wrapped} without
 * taking ownership. Copies to and from host
 * memory take any {@link MemorySegment}: native segments go straight to cudaMemcpy, heap segments
 * through a temporary native buffer.
 */
public final class DeviceMemory extends CudaResource implements AutoCloseable {
    private final long bytes;

    private DeviceMemory(CudaHandle handle, long bytes) {
        super(handle);
        this.bytes = bytes;
    }

    /**
     * Allocates {@code bytes} on the calling thread's current device. Zero bytes are allowed: no
     * native memory is allocated, the address is 0, and the memory gives empty tensors.
     *
     * @param bytes the size in bytes (not negative)
     * @return the memory, to be closed by the caller
     * @throws IllegalArgumentException when {@code bytes} is negative
     * @throws CudaException            when cudaMalloc fails (e.g. out of memory)
     */
    public static DeviceMemory allocate(long bytes) {
        if (bytes < 0) {
            throw new IllegalArgumentException("allocate: bytes " + bytes + " is negative");
        }
        if (bytes == 0) {
            CudaCalls.libraries();
            return new DeviceMemory(CudaHandle.empty("device memory", Cuda.currentDevice()), 0);
        }
        return new DeviceMemory(CudaHandle.create("device memory", "cudaMalloc(" + bytes + " bytes)",
                out -> CudaRuntime.cudaMalloc(out, bytes), CudaRuntime::cudaFree, "cudaFree"), bytes);
    }

    /**
     * Allocates {@code bytes} on the calling thread's current device with NCCL's allocator
     * (ncclMemAlloc, freed with ncclMemFree on {@link #close()}; NCCL 2.19+). NCCL picks an
     * allocation its fast paths can use once the memory is {@linkplain dev.jnccl.Communicator#register
     * registered} with a communicator (CUDA's VMM with the handle types and granularity NVLink
     * SHARP and zero-copy transports need, where the system has them; plain cudaMalloc otherwise).
     * The memory is used like any other: tensors, copies, every command.
     *
     * @param bytes the size in bytes, positive
     * @return the memory, to be closed by the caller
     * @throws IllegalArgumentException      when {@code bytes} is not positive
     * @throws UnsupportedOperationException when the loaded NCCL has no ncclMemAlloc
     * @throws NcclException                 when ncclMemAlloc fails (e.g. out of memory)
     */
    public static DeviceMemory allocateForNccl(long bytes) {
        if (bytes <= 0) {
            throw new IllegalArgumentException("allocateForNccl: bytes " + bytes + " must be positive");
        }
        var libraries = CudaCalls.libraries();
        NcclFeature feature = NcclFeature.MEM_ALLOC_AND_REGISTER;
        if (!libraries.supports(feature)) {
            throw new UnsupportedOperationException("allocateForNccl: ncclMemAlloc needs NCCL "
                    + VersionCodes.text(feature.sinceVersion()) + " or newer; this is NCCL "
                    + VersionCodes.text(libraries.ncclVersion()));
        }
        int device = Cuda.currentDevice();
        return new DeviceMemory(CudaHandle.create("device memory", "ncclMemAlloc(" + bytes + " bytes)",
                nccl("ncclMemAlloc(" + bytes + " bytes)", device, out -> Nccl.ncclMemAlloc(out, bytes)),
                nccl("ncclMemFree", device, Nccl::ncclMemFree), "ncclMemFree"), bytes);
    }

    /** An NCCL call as CudaHandle's create or destroy: its failure is an {@link NcclException}. */
    private static ToIntFunction<MemorySegment> nccl(String function, int device, ToIntFunction<MemorySegment> call) {
        return segment -> {
            int result = call.applyAsInt(segment);
            if (result != 0) {
                throw new NcclException(function, result, Native.ncclErrorText(result),
                        Native.ncclLastError(MemorySegment.NULL), -1, device);
            }
            return 0;
        };
    }

    /**
     * Allocates room for {@code count} elements of {@code dtype} on the current device.
     *
     * @param dtype the element type
     * @param count the number of elements (not negative; 0 gives an empty allocation)
     * @return the memory, to be closed by the caller
     * @throws IllegalArgumentException when {@code count} is negative or its byte size overflows a long
     */
    public static DeviceMemory allocate(DType dtype, long count) {
        Objects.requireNonNull(dtype, "allocate: dtype is null");
        if (count < 0) {
            throw new IllegalArgumentException("allocate: count " + count + " is negative");
        }
        if (count > Long.MAX_VALUE / dtype.size()) {
            throw new IllegalArgumentException("allocate: count " + count + " of " + dtype + " (" + dtype.size()
                    + " bytes each) overflows a long byte size: at most " + Long.MAX_VALUE / dtype.size()
                    + " elements");
        }
        return allocate(count * dtype.size());
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
        if (bytes <= 0) {
            throw new IllegalArgumentException("wrap: bytes " + bytes + " must be positive");
        }
        return new DeviceMemory(CudaHandle.wrap("device memory", MemorySegment.ofAddress(address), device,
                "wrap: address is 0"), bytes);
    }

    /** {@return the device address (0 for a zero-byte allocation)} */
    public long address() {
        handle.requireOpen("address", this);
        return handle.segment().address();
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
     * This memory as a tensor of {@code bytes() / dtype.size()} elements. The tensor (and its shards
     * and slices) keeps a reference to this memory: it knows its {@linkplain DeviceTensor#device()
     * device}, and jnccl refuses it once this memory is closed.
     *
     * <p>The size must be a whole number of elements: rounding down would hide the trailing bytes
     * from every collective without a word (12 bytes as FP64 would be one element). For a tensor over
     * part of the memory, take a {@linkplain DeviceTensor#slice(long, long) slice} of a tensor of a
     * smaller element type, or allocate with {@link #allocate(DType, long)}.
     *
     * @param dtype the element type
     * @return a tensor view of the whole memory
     * @throws IllegalArgumentException when {@link #bytes()} is not a multiple of {@code dtype.size()}
     */
    public DeviceTensor tensor(DType dtype) {
        Objects.requireNonNull(dtype, "tensor: dtype is null");
        handle.requireOpen("tensor", this);
        if (bytes % dtype.size() != 0) {
            throw new IllegalArgumentException("tensor: the memory's " + bytes + " bytes are not a whole number of "
                    + dtype + " elements (" + dtype.size() + " bytes each): allocate a multiple of "
                    + dtype.size() + " bytes, e.g. with allocate(" + dtype + ", count)");
        }
        return new DeviceTensor(handle.segment().address(), dtype, bytes / dtype.size(), this);
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
        handle.requireOpen("copyFromHost", this);
        checkRange("copyFromHost", offset, source.byteSize());
        if (source.byteSize() == 0) {
            return;
        }
        if (source.isNative()) {
            memcpy(at(offset), source, source.byteSize(), CudaRuntime.cudaMemcpyHostToDevice());
            return;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment staging = arena.allocate(source.byteSize(), 16);
            staging.copyFrom(source);
            memcpy(at(offset), staging, source.byteSize(), CudaRuntime.cudaMemcpyHostToDevice());
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
        handle.requireOpen("copyToHost", this);
        checkRange("copyToHost", offset, target.byteSize());
        if (target.byteSize() == 0) {
            return;
        }
        if (target.isReadOnly()) {
            throw new IllegalArgumentException("copyToHost: target segment is read-only");
        }
        if (target.isNative()) {
            memcpy(target, at(offset), target.byteSize(), CudaRuntime.cudaMemcpyDeviceToHost());
            return;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment staging = arena.allocate(target.byteSize(), 16);
            memcpy(staging, at(offset), target.byteSize(), CudaRuntime.cudaMemcpyDeviceToHost());
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
        handle.requireOpen("fill", this);
        MemorySegment streamHandle = stream.handle();
        if (bytes == 0) {
            return;
        }
        CudaCalls.check(CudaRuntime.cudaMemsetAsync(handle.segment(), value, bytes, streamHandle), "cudaMemsetAsync",
                handle.device());
    }

    private MemorySegment at(long offset) {
        return MemorySegment.ofAddress(handle.segment().address() + offset);
    }

    private void memcpy(MemorySegment dst, MemorySegment src, long count, int kind) {
        CudaCalls.check(CudaRuntime.cudaMemcpy(dst, src, count, kind), "cudaMemcpy", handle.device());
    }

    private void checkRange(String operation, long offset, long length) {
        if (offset < 0 || length < 0 || offset > bytes || length > bytes - offset) {
            throw new IllegalArgumentException(operation + ": " + length + " bytes at offset " + offset
                    + " do not fit in " + bytes + " bytes of device memory");
        }
    }

    /**
     * Frees owned memory; idempotent. Make sure no stream still uses it.
     *
     * @throws IllegalStateException while the memory is {@linkplain dev.jnccl.Communicator#register
     *                               registered} with a communicator (close the registration first:
     *                               NCCL would keep a registration of freed memory)
     */
    @Override
    public void close() {
        List<String> holders = Pins.unlessPinned(this, handle::close);
        if (holders != null) {
            throw new IllegalStateException("close: " + this + " is still registered with " + String.join(", ", holders)
                    + "; close the registration first");
        }
    }

    @Override
    public String toString() {
        return handle.describe("DeviceMemory", ", " + bytes + " bytes");
    }
}
