package dev.jnccl.mpi;

import dev.jnccl.Diagnosis;
import dev.jnccl.RankSummary;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;

/**
 * {@link RankSummary} and {@link Diagnosis} as the bytes of MPI messages between the ranks of one
 * job (the same classes on both ends): their components in declaration order, texts as modified
 * UTF-8, enums by name. Compact and free of Java serialization, so a peer's message can only ever
 * make these records (through their checking constructors). Texts longer than {@value #TEXT_CHARS}
 * characters are cut: a reason or a frame, never needed whole for a verdict.
 */
final class SummaryCodec {
    /** The longest text kept (modified UTF-8 takes at most 3 bytes a character: under writeUTF's 64 KiB). */
    static final int TEXT_CHARS = 8_000;

    private SummaryCodec() {}

    /** Writes what {@code write} writes into a fresh array. */
    static byte[] bytes(Writer write) {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(512);
        try (DataOutputStream out = new DataOutputStream(bytes)) {
            write.to(out);
        } catch (IOException e) {
            throw new UncheckedIOException(e); // a byte array does not fail
        }
        return bytes.toByteArray();
    }

    /** {@return a reader of {@code bytes}} */
    static DataInputStream reader(byte[] bytes) {
        return new DataInputStream(new ByteArrayInputStream(bytes));
    }

    /** What goes into a message. */
    @FunctionalInterface
    interface Writer {
        void to(DataOutputStream out) throws IOException;
    }

    static void writeText(DataOutputStream out, String text) throws IOException {
        out.writeUTF(text.length() <= TEXT_CHARS ? text : text.substring(0, TEXT_CHARS) + "...");
    }

    static void writeSummary(DataOutputStream out, RankSummary s) throws IOException {
        out.writeInt(s.rank());
        out.writeInt(s.worldSize());
        out.writeUTF(s.status().name());
        writeText(out, s.detail());
        out.writeLong(s.executed());
        out.writeLong(s.completed());
        out.writeInt(s.pending().size());
        for (RankSummary.Pending p : s.pending()) {
            out.writeLong(p.transaction());
            writeTexts(out, p.commands());
        }
        out.writeUTF(s.activity().name());
        writeText(out, s.call());
        writeText(out, s.thread());
        writeText(out, s.location());
        writeTexts(out, s.stack());
    }

    static RankSummary readSummary(DataInputStream in) throws IOException {
        int rank = in.readInt();
        int worldSize = in.readInt();
        RankSummary.Status status = RankSummary.Status.valueOf(in.readUTF());
        String detail = in.readUTF();
        long executed = in.readLong();
        long completed = in.readLong();
        int pendingCount = in.readInt();
        List<RankSummary.Pending> pending = new ArrayList<>(Math.min(pendingCount, 64));
        for (int i = 0; i < pendingCount; i++) {
            pending.add(new RankSummary.Pending(in.readLong(), readTexts(in)));
        }
        RankSummary.Activity activity = RankSummary.Activity.valueOf(in.readUTF());
        return new RankSummary(rank, worldSize, status, detail, executed, completed, pending, activity, in.readUTF(),
                in.readUTF(), in.readUTF(), readTexts(in));
    }

    static void writeDiagnosis(DataOutputStream out, Diagnosis d) throws IOException {
        writeText(out, d.verdict());
        out.writeBoolean(d.complete());
        out.writeInt(d.summaries().size());
        for (RankSummary s : d.summaries()) {
            writeSummary(out, s);
        }
    }

    static Diagnosis readDiagnosis(DataInputStream in) throws IOException {
        String verdict = in.readUTF();
        boolean complete = in.readBoolean();
        int count = in.readInt();
        List<RankSummary> summaries = new ArrayList<>(Math.min(count, 1024));
        for (int i = 0; i < count; i++) {
            summaries.add(readSummary(in));
        }
        return new Diagnosis(verdict, summaries, complete);
    }

    private static void writeTexts(DataOutputStream out, List<String> texts) throws IOException {
        out.writeInt(texts.size());
        for (String text : texts) {
            writeText(out, text);
        }
    }

    private static List<String> readTexts(DataInputStream in) throws IOException {
        int count = in.readInt();
        List<String> texts = new ArrayList<>(Math.min(count, 64));
        for (int i = 0; i < count; i++) {
            texts.add(in.readUTF());
        }
        return texts;
    }
}
