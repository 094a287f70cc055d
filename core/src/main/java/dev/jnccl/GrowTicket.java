package dev.jnccl;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.Objects;

/**
 * What the ranks of a grow share: how the grown communicator is made (its {@link Path}), the sizes
 * of the world before and after, and the unique id the new communicator meets at. The existing
 * ranks get it from {@link Communicator#growTicket} (collective among them); their launcher hands
 * it to the new ranks ({@link #bytes()} and {@link #fromBytes} carry it between processes), which
 * join with {@link Communicator#joinGrow}. All ranks, old and new, thus take the same path.
 *
 * <p>A ticket serves one grow: it holds NCCL's id of that grow ({@code ncclCommGetUniqueId}) or the
 * fresh id of the re-init, and only the communicator that made it accepts it.
 */
public final class GrowTicket {
    /** The number of bytes of {@link #bytes()}. */
    public static final int BYTES = 8 + 4 + 4 + 4 + UniqueId.BYTES;
    private static final long MAGIC = 0x4a4e43434c475431L; // "JNCCLGT1"

    /** How the grown communicator is made; every rank of the grow takes the same. */
    public enum Path {
        /**
         * NCCL's {@code ncclCommGrow} (NCCL 2.29.2+): the existing ranks grow their healthy
         * communicator, the new ranks join with the id from {@code ncclCommGetUniqueId}.
         */
        NCCL,
        /**
         * A new communicator of every rank, old and new, initialized with a fresh unique id (any NCCL;
         * taken when NCCL cannot grow or the communicator is not healthy).
         */
        REINIT
    }

    private final Path path;
    private final int fromWorld;
    private final int toWorld;
    private final UniqueId id;

    GrowTicket(Path path, int fromWorld, int toWorld, UniqueId id) {
        this.path = Objects.requireNonNull(path, "GrowTicket: path is null");
        this.id = Objects.requireNonNull(id, "GrowTicket: id is null");
        if (fromWorld < 1 || toWorld <= fromWorld) {
            throw new IllegalArgumentException("GrowTicket: worlds " + fromWorld + " -> " + toWorld
                    + ": the grown world must be larger than the existing one (at least 1)");
        }
        this.fromWorld = fromWorld;
        this.toWorld = toWorld;
    }

    /** {@return how the grown communicator is made} */
    public Path path() {
        return path;
    }

    /** {@return the number of ranks before the grow: the new ranks are {@code [fromWorld, toWorld)}} */
    public int fromWorld() {
        return fromWorld;
    }

    /** {@return the number of ranks of the grown communicator} */
    public int toWorld() {
        return toWorld;
    }

    /** {@return the unique id the grown communicator meets at} */
    UniqueId id() {
        return id;
    }

    /**
     * This ticket as {@link #BYTES} bytes, for a launcher that hands it to new ranks in other processes.
     *
     * @return a new array
     */
    public byte[] bytes() {
        ByteBuffer buffer = ByteBuffer.allocate(BYTES).order(ByteOrder.BIG_ENDIAN);
        buffer.putLong(MAGIC).putInt(path.ordinal()).putInt(fromWorld).putInt(toWorld).put(id.bytes());
        return buffer.array();
    }

    /**
     * The ticket that {@link #bytes()} gave.
     *
     * @param bytes the {@link #BYTES} bytes
     * @return the ticket
     * @throws IllegalArgumentException when {@code bytes} is null or not a ticket's bytes
     */
    public static GrowTicket fromBytes(byte[] bytes) {
        if (bytes == null || bytes.length != BYTES) {
            throw new IllegalArgumentException("GrowTicket.fromBytes: " + (bytes == null ? "bytes is null"
                    : bytes.length + " bytes; a ticket has " + BYTES));
        }
        ByteBuffer buffer = ByteBuffer.wrap(bytes).order(ByteOrder.BIG_ENDIAN);
        int path = buffer.getLong() == MAGIC ? buffer.getInt() : -1;
        if (path < 0 || path >= Path.values().length) {
            throw new IllegalArgumentException("GrowTicket.fromBytes: these bytes are not a jnccl grow ticket"
                    + " (made by GrowTicket.bytes)");
        }
        int fromWorld = buffer.getInt();
        int toWorld = buffer.getInt();
        byte[] id = Arrays.copyOfRange(bytes, buffer.position(), BYTES);
        return new GrowTicket(Path.values()[path], fromWorld, toWorld, UniqueId.fromBytes(id));
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof GrowTicket other && other.path == path && other.fromWorld == fromWorld
                && other.toWorld == toWorld && other.id.equals(id);
    }

    @Override
    public int hashCode() {
        return Objects.hash(path, fromWorld, toWorld, id);
    }

    @Override
    public String toString() {
        return "GrowTicket[" + fromWorld + " -> " + toWorld + " ranks by "
                + path.name().toLowerCase(java.util.Locale.ROOT) + ", " + id + "]";
    }
}
