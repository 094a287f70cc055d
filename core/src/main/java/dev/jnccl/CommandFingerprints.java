package dev.jnccl;

import dev.jnccl.spi.Command;
import dev.jnccl.spi.Command.Kind;
import dev.jnccl.spi.Command.Role;
import dev.jnccl.spi.Command.Shape;
import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * What the consistency check ({@link ConsistencyCheck}) exchanges and how it judges: each rank's
 * fingerprint of one transaction's commands (what NCCL must see alike on every rank: the kind,
 * the count as the kind's {@link Shape} makes it, the element type, the reduction with a scaled
 * sum's factor, the root or peer, the counts of the uneven kinds) as bytes, and the verdict on
 * every rank's fingerprints. The verdict depends on the gathered bytes only, so every rank reaches
 * the same one. Allocates freely: it runs only when the check is on.
 */
final class CommandFingerprints {
    /** "JNC1": tells a fingerprint from other bytes a rank that does not check sent to the same host gather. */
    private static final int MAGIC = 0x4A4E4331;
    private static final Kind[] KINDS = Kind.values();
    private static final DType[] DTYPES = DType.values();
    private static final ReduceOp.Kind[] OPS = ReduceOp.Kind.values();

    private CommandFingerprints() {}

    /** One command as the check compares it; counts of the uneven kinds, else null. */
    record Entry(Kind kind, DType dtype, ReduceOp op, int target, long count, long[] sendCounts, long[] recvCounts) {
        /** Whether NCCL would see the same collective on two ranks (the uneven all-to-all's counts are compared pairwise). */
        boolean sameCollective(Entry other) {
            return other != null && Field.differing(List.of(this, other)).isEmpty();
        }
    }

    /** One rank's fingerprint: what it calls the work (e.g. "transaction #41") and its commands in order. */
    record Fingerprint(String label, List<Entry> commands) {
        List<Entry> collectives() {
            return commands.stream().filter(e -> e.kind.role() != Role.PEER).toList();
        }

        /** {@return the sends ({@code kind} SEND) to {@code peer} or receives (RECV) from it, in order} */
        List<Entry> pointToPoint(Kind kind, int peer) {
            return commands.stream().filter(e -> e.kind == kind && e.target == peer).toList();
        }
    }

    // ------------------------------------------------------------------ encoding

    /**
     * {@return this rank's fingerprint of {@code commands}, as bytes}
     *
     * @param label what the verdict calls the work, e.g. "transaction #41"
     */
    static byte[] encode(String label, List<Command> commands) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(64 + 40 * commands.size());
        try (DataOutputStream out = new DataOutputStream(bytes)) {
            out.writeInt(MAGIC);
            out.writeUTF(label);
            out.writeInt(commands.size());
            for (int i = 0; i < commands.size(); i++) {
                write(out, commands.get(i));
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e); // a ByteArrayOutputStream does not fail
        }
        return bytes.toByteArray();
    }

    private static void write(DataOutputStream out, Command command) throws IOException {
        Kind kind = command.kind();
        out.writeByte(kind.ordinal());
        out.writeByte(command.dtype().ordinal());
        ReduceOp op = command.op();
        out.writeByte(op == null ? -1 : op.kind().ordinal());
        out.writeDouble(op == null ? 0 : op.factor());
        out.writeInt(kind.role() == Role.ROOT ? command.root() : command.peer());
        out.writeLong(count(command));
        writeCounts(out, command.sendCounts());
        writeCounts(out, command.receiveCounts());
    }

    /** The count NCCL must see alike, by the kind's shape: the element count, or the per-rank slot. */
    private static long count(Command command) {
        return switch (command.kind().shape()) {
            case SAME -> command.src() != null ? command.src().count() : command.dst().count();
            case SCATTERED -> command.dst().count();
            case GATHERED, EXCHANGED, ONE -> command.src().count();
            case COUNTED, BLOCKS -> -1; // their counts are compared instead
        };
    }

    private static void writeCounts(DataOutputStream out, long[] counts) throws IOException {
        out.writeInt(counts == null ? -1 : counts.length);
        if (counts != null) {
            for (long count : counts) {
                out.writeLong(count);
            }
        }
    }

    /** {@return the fingerprint in {@code bytes}, or null when they are none (another host call's bytes)} */
    static Fingerprint decode(byte[] bytes) {
        ByteBuffer in = ByteBuffer.wrap(bytes);
        try {
            if (in.getInt() != MAGIC) {
                return null;
            }
            byte[] label = new byte[in.getShort() & 0xFFFF];
            in.get(label);
            int size = in.getInt();
            List<Entry> commands = new ArrayList<>();
            for (int i = 0; i < size; i++) {
                commands.add(read(in));
            }
            // writeUTF's modified UTF-8 equals UTF-8 for the labels made here (no NUL, no surrogates).
            return in.hasRemaining() ? null : new Fingerprint(new String(label, StandardCharsets.UTF_8), commands);
        } catch (BufferUnderflowException | IndexOutOfBoundsException | IllegalArgumentException e) {
            return null;
        }
    }

    private static Entry read(ByteBuffer in) {
        Kind kind = KINDS[in.get()];
        DType dtype = DTYPES[in.get()];
        int opKind = in.get();
        double factor = in.getDouble();
        ReduceOp op = opKind < 0 ? null : OPS[opKind] == ReduceOp.Kind.SCALED_SUM ? ReduceOp.scaledSum(factor)
                : ReduceOp.valueOf(OPS[opKind].name());
        int target = in.getInt();
        long count = in.getLong();
        return new Entry(kind, dtype, op, target, count, readCounts(in), readCounts(in));
    }

    private static long[] readCounts(ByteBuffer in) {
        int length = in.getInt();
        if (length < 0) {
            return null;
        }
        long[] counts = new long[length];
        for (int i = 0; i < length; i++) {
            counts[i] = in.getLong();
        }
        return counts;
    }

    // ------------------------------------------------------------------ the verdict

    /** What the verdict names as differing, in the order it looks. */
    enum Field {
        KIND("kind"), COUNT("count"), DTYPE("dtype"), OP("op"), ROOT("root"), COUNTS("counts");

        final String word;

        Field(String word) {
            this.word = word;
        }

        /** {@return the fields in which {@code entries} (one per rank, none null) differ; the kind alone when it does} */
        static List<Field> differing(List<Entry> entries) {
            Entry first = entries.getFirst();
            List<Field> fields = new ArrayList<>();
            for (Entry e : entries) {
                if (e.kind != first.kind) {
                    return List.of(KIND);
                }
            }
            for (Field field : List.of(COUNT, DTYPE, OP, ROOT, COUNTS)) {
                for (Entry e : entries) {
                    if (!field.same(first, e)) {
                        fields.add(field);
                        break;
                    }
                }
            }
            return fields;
        }

        private boolean same(Entry a, Entry b) {
            return switch (this) {
                case KIND -> a.kind == b.kind;
                case DTYPE -> a.dtype == b.dtype;
                case COUNT -> a.count == b.count;
                case OP -> Objects.equals(a.op, b.op);
                case ROOT -> a.kind.role() != Role.ROOT || a.target == b.target;
                // The uneven all-to-all's counts differ by rank: they are matched pairwise instead.
                case COUNTS -> a.kind.shape() == Shape.COUNTED || Arrays.equals(a.recvCounts, b.recvCounts);
            };
        }
    }

    /**
     * The verdict on every rank's fingerprint of the same step, in rank order: null when NCCL would
     * see matching calls, else one line naming the work, the field that differs, the ranks and what
     * each group of them called.
     */
    static String verdict(List<byte[]> gathered) {
        List<Fingerprint> all = new ArrayList<>(gathered.size());
        for (int r = 0; r < gathered.size(); r++) {
            Fingerprint fingerprint = decode(gathered.get(r));
            if (fingerprint == null) {
                return "the consistency check (jnccl.debug=detail) got no fingerprint of the commands from rank " + r
                        + " but other bytes (that rank made another host-side call: turn the check on for every"
                        + " rank alike, or for none)";
            }
            all.add(fingerprint);
        }
        String found = Verdicts.collectives(all);
        if (found == null) {
            found = Verdicts.pointToPoint(all);
        }
        return found == null ? null : Verdicts.subject(all) + " refused before NCCL ran it (consistency check,"
                + " jnccl.debug=detail): " + found;
    }
}
