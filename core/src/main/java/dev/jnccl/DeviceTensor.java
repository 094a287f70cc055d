package dev.jnccl;

import dev.jnccl.cuda.DeviceMemory;
import java.util.Objects;

/**
 * A typed view of device memory: where it starts, what its elements are, how many there are. A
 * tensor does not own memory; it is a value that can be split into shards without copying.
 *
 * <p>A tensor made by {@link DeviceMemory#tensor(DType)} (and its shards and slices) keeps a
 * reference to that memory, so it knows its {@linkplain #device() device} and whether the memory
 * was closed: jnccl refuses it, before any native call, on another device than the communicator's
 * and once its memory is closed. A tensor made from a raw address of another library
 * ({@link #DeviceTensor(long, DType, long)}) has no memory: its device is unknown and not checked.
 *
 * @param address device address of the first element (not 0 unless {@code count} is 0)
 * @param dtype   element type
 * @param count   number of elements (0 or more)
 * @param memory  the device memory this tensor views, or null when unknown (a raw address)
 */
public record DeviceTensor(long address, DType dtype, long count, DeviceMemory memory) {

    /**
     * A view of a raw device address (e.g. a pointer of another library): device unknown.
     *
     * @param address device address of the first element (not 0 unless {@code count} is 0)
     * @param dtype   element type
     * @param count   number of elements (0 or more)
     */
    public DeviceTensor(long address, DType dtype, long count) {
        this(address, dtype, count, null);
    }

    /**
     * Checks the view: a non-zero address unless the count is 0, a data type, a count not
     * negative; with a {@code memory}, that it is open and holds the whole view.
     */
    public DeviceTensor {
        Objects.requireNonNull(dtype, "DeviceTensor: dtype is null");
        if (count < 0) {
            throw new IllegalArgumentException("DeviceTensor: count " + count + " is negative");
        }
        if (address == 0 && count > 0) {
            throw new IllegalArgumentException("DeviceTensor: address is 0 for " + count + " elements");
        }
        if (count > Long.MAX_VALUE / dtype.size()) {
            throw new IllegalArgumentException("DeviceTensor: " + count + " elements of " + dtype + " overflow a long");
        }
        if (memory != null) {
            requireWithin(address, count * dtype.size(), memory);
        }
    }

    private static void requireWithin(long address, long bytes, DeviceMemory memory) {
        if (memory.isClosed()) {
            throw new IllegalStateException("DeviceTensor: " + memory + " is closed: a view of it would use freed memory");
        }
        long base = memory.address();
        if (address < base || bytes > memory.bytes() || address - base > memory.bytes() - bytes) {
            throw new IllegalArgumentException("DeviceTensor: [0x" + Long.toHexString(address) + ", +" + bytes
                    + ") is not inside " + memory);
        }
    }

    /** {@return the device of the memory, or -1 when unknown (a tensor made from a raw address)} */
    public int device() {
        return memory == null ? -1 : memory.device();
    }

    /** {@return the size in bytes} */
    public long bytes() {
        return count * dtype.size();
    }

    /**
     * Shard {@code index} of {@code shards} equal shards.
     *
     * @param index which shard, in {@code [0, shards)}
     * @param shards the number of equal shards
     * @return the shard, a view of this tensor's memory
     * @throws IllegalArgumentException when the count is not divisible or the index is out of range
     */
    public DeviceTensor shard(int index, int shards) {
        if (shards <= 0) {
            throw new IllegalArgumentException("shard: shards " + shards + " must be positive");
        }
        if (count % shards != 0) {
            throw new IllegalArgumentException("shard: " + count + " elements not divisible into " + shards + " shards");
        }
        if (index < 0 || index >= shards) {
            throw new IllegalArgumentException("shard: index " + index + " out of range [0, " + shards + ")");
        }
        long shardCount = count / shards;
        return new DeviceTensor(address + index * shardCount * dtype.size(), dtype, shardCount, memory);
    }

    /**
     * Elements {@code [offset, offset + length)} of this tensor.
     *
     * @param offset the first element
     * @param length the number of elements
     * @return the slice, a view of this tensor's memory
     */
    public DeviceTensor slice(long offset, long length) {
        if (offset < 0 || length < 0 || offset > count || length > count - offset) {
            throw new IllegalArgumentException("slice: [" + offset + ", " + offset + " + " + length
                    + ") out of range for " + count + " elements");
        }
        return new DeviceTensor(address + offset * dtype.size(), dtype, length, memory);
    }

    @Override
    public String toString() {
        return "DeviceTensor[0x" + Long.toHexString(address) + ", " + dtype + " x " + count
                + (memory == null ? "" : ", device " + memory.device() + (memory.isClosed() ? ", memory closed" : "")) + "]";
    }
}
