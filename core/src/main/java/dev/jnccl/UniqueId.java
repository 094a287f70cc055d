package dev.jnccl;

import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.bindings.nccl.ncclUniqueId;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.Objects;

/**
 * The 128-byte ncclUniqueId that names one communicator: made once (by one rank) with
 * {@link #generate()}, then handed to every rank (threads share the object; MPI broadcasts
 * {@link #bytes()}).
 */
public final class UniqueId {
    /** NCCL_UNIQUE_ID_BYTES. */
    public static final int BYTES = 128;

    private final byte[] bytes;

    private UniqueId(byte[] bytes) {
        this.bytes = bytes;
    }

    /** {@return a new id from ncclGetUniqueId} */
    public static UniqueId generate() {
        NcclCalls.libraries();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment id = ncclUniqueId.allocate(arena);
            NcclCalls.checkNccl(Nccl.ncclGetUniqueId(id), "ncclGetUniqueId", null, -1, -1);
            return new UniqueId(id.toArray(ValueLayout.JAVA_BYTE));
        }
    }

    /**
     * {@return an id received from another process}
     *
     * @param bytes the 128 bytes of {@link #bytes()} on the generating side
     */
    public static UniqueId fromBytes(byte[] bytes) {
        Objects.requireNonNull(bytes, "fromBytes: bytes is null");
        if (bytes.length != BYTES) {
            throw new IllegalArgumentException("fromBytes: " + bytes.length + " bytes, expected " + BYTES);
        }
        return new UniqueId(bytes.clone());
    }

    /** {@return a copy of the 128 bytes} */
    public byte[] bytes() {
        return bytes.clone();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof UniqueId other && Arrays.equals(bytes, other.bytes);
    }

    @Override
    public int hashCode() {
        return Arrays.hashCode(bytes);
    }

    @Override
    public String toString() {
        return "UniqueId[" + HexFormat.of().formatHex(bytes, 0, 8) + "...]";
    }
}
