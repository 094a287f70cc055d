package dev.jnccl.mpi;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.jnccl.Diagnosis;
import dev.jnccl.RankSummary;
import java.io.EOFException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/**
 * The bytes MPI mode's ranks exchange for a diagnosis: random summaries and diagnoses come back
 * equal, component by component; a text past the limit is cut; a truncated message fails to read
 * instead of making a summary.
 */
class SummaryCodecTest {
    private final SplittableRandom random = new SplittableRandom();

    private String text(int maxLength) {
        StringBuilder sb = new StringBuilder();
        int length = random.nextInt(maxLength + 1);
        for (int i = 0; i < length; i++) {
            // Beyond ASCII too: modified UTF-8 takes up to 3 bytes a character.
            sb.append((char) (random.nextBoolean() ? 'a' + random.nextInt(26) : 0x80 + random.nextInt(0x3000)));
        }
        return sb.toString();
    }

    private List<String> texts(int count) {
        List<String> texts = new ArrayList<>();
        for (int i = 0; i < count; i++) {
            texts.add(text(120));
        }
        return texts;
    }

    private RankSummary summary(int rank, int worldSize) {
        List<RankSummary.Pending> pending = new ArrayList<>();
        int count = random.nextInt(5);
        for (int i = 0; i < count; i++) {
            pending.add(new RankSummary.Pending(random.nextLong(1, Long.MAX_VALUE), texts(1 + random.nextInt(4))));
        }
        RankSummary.Status[] statuses = RankSummary.Status.values();
        RankSummary.Activity[] activities = RankSummary.Activity.values();
        return new RankSummary(rank, worldSize, statuses[random.nextInt(statuses.length)], text(300),
                random.nextLong(0, Long.MAX_VALUE), random.nextLong(0, Long.MAX_VALUE), pending,
                activities[random.nextInt(activities.length)], text(30), text(40), text(60), texts(random.nextInt(9)));
    }

    @Test
    void aSummaryComesBackEqual() throws IOException {
        for (int round = 0; round < 200; round++) {
            int worldSize = 1 + random.nextInt(64);
            RankSummary sent = summary(random.nextInt(worldSize), worldSize);
            byte[] bytes = SummaryCodec.bytes(out -> SummaryCodec.writeSummary(out, sent));
            assertEquals(sent, SummaryCodec.readSummary(SummaryCodec.reader(bytes)));
        }
    }

    @Test
    void aDiagnosisComesBackEqual() throws IOException {
        for (int round = 0; round < 50; round++) {
            int worldSize = 1 + random.nextInt(8);
            List<RankSummary> summaries = new ArrayList<>();
            for (int r = 0; r < worldSize; r++) {
                summaries.add(summary(r, worldSize));
            }
            Diagnosis sent = new Diagnosis("rank " + random.nextInt(worldSize) + " " + text(200).replace('\n', ' ')
                    + "x", summaries, random.nextBoolean());
            byte[] bytes = SummaryCodec.bytes(out -> SummaryCodec.writeDiagnosis(out, sent));
            assertEquals(sent, SummaryCodec.readDiagnosis(SummaryCodec.reader(bytes)));
        }
    }

    @Test
    void aTextPastTheLimitIsCutAndATruncatedMessageIsRefused() throws IOException {
        String longDetail = "y".repeat(SummaryCodec.TEXT_CHARS + 1 + random.nextInt(1000));
        RankSummary sent = new RankSummary(1, 3, RankSummary.Status.ABORTED, longDetail, 4, 3, List.of(),
                RankSummary.Activity.WAIT, "synchronize", "main", "", List.of());
        byte[] bytes = SummaryCodec.bytes(out -> SummaryCodec.writeSummary(out, sent));
        RankSummary read = SummaryCodec.readSummary(SummaryCodec.reader(bytes));
        assertEquals("y".repeat(SummaryCodec.TEXT_CHARS) + "...", read.detail());
        assertEquals(4, read.executed());
        byte[] cut = java.util.Arrays.copyOf(bytes, bytes.length - 1 - random.nextInt(bytes.length - 1));
        assertThrows(EOFException.class, () -> SummaryCodec.readSummary(SummaryCodec.reader(cut)));
    }
}
