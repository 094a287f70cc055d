package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.RankSummary.Activity;
import dev.jnccl.RankSummary.Pending;
import dev.jnccl.RankSummary.Status;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The diagnosis dumps and their offline merge: a dump reads back as it was written; the merge of a
 * folder makes the verdict the live diagnosis made, also when a rank's file is missing (from the
 * summary a peer's diagnosis holds), names a rank that left no file and that no diagnosis describes,
 * and refuses folders it cannot read. The folder's setting: options, then property, then environment.
 */
class DiagnosisDumpTest {
    private static final SplittableRandom RANDOM = new SplittableRandom();
    private static final String AT_STEP = "Trainer.step(Trainer.java:88)";

    /** Rank {@code rank} of 3 waiting in synchronize for transaction {@code executed}, a random count. */
    private static RankSummary waiting(int rank, long executed, long elements) {
        List<String> commands = List.of("allReduce SUM FP32 " + elements + " elements (" + 4 * elements + " bytes)");
        return new RankSummary(rank, 3, Status.OPEN, "", executed, executed - 1, List.of(new Pending(executed, commands)),
                Activity.WAIT, "synchronize", "jnccl-rank-" + rank, "Trainer.step(Trainer.java:90)",
                List.of("dev.jnccl.Communicator.synchronize(Communicator.java:1)", "Trainer.step(Trainer.java:90)"));
    }

    private static RankSummary inUserCode(int rank, long executed) {
        return new RankSummary(rank, 3, Status.OPEN, "", executed, executed, List.of(), Activity.USER_CODE, "",
                "jnccl-rank-" + rank, AT_STEP, List.of("java.base/java.lang.Thread.sleep0(Native Method)"));
    }

    /** Ranks 0 and 1 wait in transaction #n, rank 2 stays in user code after n-1. */
    private static List<RankSummary> laggard(long n) {
        long elements = 1 + RANDOM.nextInt(1 << 20);
        return List.of(waiting(0, n, elements), waiting(1, n, elements), inUserCode(2, n - 1));
    }

    private static DiagnosisDump dump(RankSummary summary, Diagnosis diagnosis) {
        return new DiagnosisDump(summary, "2026-12-05T08:00:00Z", "abort", diagnosis == null ? "" : diagnosis.verdict()
                + "\nwatchdog: transaction #9 not complete", List.of("last 1 transaction(s), oldest first:", "    #9 age"),
                diagnosis);
    }

    @Test
    void aDumpReadsBackAsItWasWritten(@TempDir Path folder) throws IOException {
        List<RankSummary> all = laggard(2 + RANDOM.nextInt(1000));
        Diagnosis diagnosis = new Diagnosis(Verdict.of(3, all), all, true);
        DiagnosisDump written = dump(all.get(1), diagnosis);
        Path file = written.write(folder.resolve("made/here"));
        assertEquals("jnccl-rank-1-of-3.json", file.getFileName().toString());
        assertEquals(written, DiagnosisDump.read(file));
        DiagnosisDump withoutDiagnosis = dump(all.get(2), null);
        assertEquals(withoutDiagnosis, DiagnosisDump.read(withoutDiagnosis.write(folder)));
        try (var listed = Files.list(folder)) {
            assertEquals(List.of("jnccl-rank-2-of-3.json", "made"), listed.map(p -> p.getFileName().toString()).sorted()
                    .toList(), "no temporary file is left");
        }
    }

    @Test
    void theMergeMakesTheLiveVerdictAlsoWithoutTheCulpritsFile(@TempDir Path folder) throws IOException {
        long n = 2 + RANDOM.nextInt(1000);
        List<RankSummary> all = laggard(n);
        Diagnosis diagnosis = new Diagnosis(Verdict.of(3, all), all, true);
        assertEquals("rank 2 never reached transaction #" + n + " (it is in user code: at " + AT_STEP + ")",
                diagnosis.verdict());
        for (RankSummary summary : all) {
            dump(summary, diagnosis).write(folder);
        }
        DiagnoseDumps.Merged merged = DiagnoseDumps.merge(folder);
        assertEquals(diagnosis.verdict(), merged.verdict());
        assertEquals(all, merged.summaries());
        Files.delete(folder.resolve("jnccl-rank-2-of-3.json"));
        merged = DiagnoseDumps.merge(folder);
        assertEquals(diagnosis.verdict(), merged.verdict());
        assertEquals("no file; a peer's diagnosis", merged.sources().get(2));
        String report = merged.report();
        assertTrue(report.startsWith("verdict: " + diagnosis.verdict() + "\n2 of 3 rank(s) left a file in " + folder),
                report);
        assertTrue(report.contains("#" + n + " allReduce SUM FP32"), report);
    }

    @Test
    void aRankThatLeftNoFileAndIsInNoDiagnosisIsNamed(@TempDir Path folder) throws IOException {
        long n = 2 + RANDOM.nextInt(1000);
        long elements = 1 + RANDOM.nextInt(1 << 20);
        // What ranks of an MPI job whose rank 1 was killed leave: their own views only.
        for (int r : new int[] {0, 2}) {
            RankSummary own = waiting(r, n, elements);
            dump(own, new Diagnosis(Verdict.of(3, List.of(own)), List.of(own), false)).write(folder);
        }
        DiagnoseDumps.Merged merged = DiagnoseDumps.merge(folder);
        assertEquals("rank 1 gave no summary: " + DiagnoseDumps.NO_FILE, merged.verdict());
        assertEquals(List.of("its file", "no file", "its file"), merged.sources());
        assertTrue(merged.report().contains("its verdict: rank 0's view only"), merged.report());
    }

    @Test
    void foldersThatHoldNoOneJobsDumpsAreRefused(@TempDir Path folder) throws IOException {
        assertEquals("no jnccl-rank-R-of-W.json file in " + folder, refused(folder));
        assertEquals(folder.resolve("none") + " is not a folder", refused(folder.resolve("none")));
        List<RankSummary> all = laggard(5);
        dump(all.get(0), null).write(folder);
        RankSummary otherWorld = new RankSummary(1, 2, Status.OPEN, "", 3, 3, List.of(), Activity.USER_CODE, "", "", "",
                List.of());
        dump(otherWorld, null).write(folder);
        assertTrue(refused(folder).endsWith(" holds dumps of world sizes 3 and 2: one job's files per folder")
                || refused(folder).endsWith(" holds dumps of world sizes 2 and 3: one job's files per folder"),
                refused(folder));
        Files.delete(folder.resolve("jnccl-rank-1-of-2.json"));
        Files.writeString(folder.resolve("jnccl-rank-1-of-3.json"), "{\"format\": \"something else\", \"version\": 1}");
        assertEquals(folder.resolve("jnccl-rank-1-of-3.json") + ": not a \"jnccl diagnosis dump\" of version 1"
                + " (format something else, version 1)", refused(folder));
        Files.writeString(folder.resolve("jnccl-rank-1-of-3.json"), "{\"format\": ");
        assertTrue(refused(folder).contains("Json: expected a value at offset 11"), refused(folder));
    }

    private static String refused(Path folder) {
        return assertThrows(IllegalArgumentException.class, () -> DiagnoseDumps.merge(folder)).getMessage();
    }

    @Test
    void theFolderComesFromTheOptionsElseThePropertyElseTheEnvironment(@TempDir Path folder) throws IOException {
        CommunicatorOptions defaults = CommunicatorOptions.defaults();
        Map<String, String> property = Map.of(DumpWriter.PROPERTY, "/p");
        Map<String, String> variable = Map.of(DumpWriter.VARIABLE, " /e ");
        assertNull(DumpWriter.folder(defaults, k -> null, k -> null));
        assertNull(DumpWriter.folder(defaults, k -> " ", k -> ""));
        assertEquals(Path.of("/e"), DumpWriter.folder(defaults, k -> "", variable::get));
        assertEquals(Path.of("/p"), DumpWriter.folder(defaults, property::get, variable::get));
        assertEquals(folder, DumpWriter.folder(defaults.withDiagnosisDirectory(folder), property::get, variable::get));
        assertNull(DumpWriter.of(defaults.withDiagnosisDirectory(folder), true, new FlightRecorder(4)),
                "a split communicator writes no dump");
    }

    @Test
    void theOptionKeepsTheOtherValuesAndRefusesAFile(@TempDir Path folder) throws IOException {
        CommunicatorOptions options = CommunicatorOptions.defaults().withWatchdog(Duration.ofSeconds(7))
                .withConsistencyChecks(true).withDiagnosisDirectory(folder);
        assertEquals(folder, options.diagnosisDirectory());
        assertEquals(Duration.ofSeconds(7), options.watchdogTimeout());
        assertTrue(options.consistencyChecks());
        assertEquals(options.withDiagnosisDirectory(null), new CommunicatorOptions(options.initTimeout(),
                options.closeTimeout(), options.watchdogTimeout(), options.watchdogInterval(),
                options.flightRecorderSize(), options.mode(), options.minCTAs(), options.maxCTAs(),
                options.cgaClusterSize(), options.name(), true));
        Path file = Files.writeString(folder.resolve("a-file"), "x");
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> options.withDiagnosisDirectory(file));
        assertEquals("CommunicatorOptions: diagnosisDirectory " + file + " is not a folder: expected a folder, one that"
                + " does not exist yet, or null for none", e.getMessage());
    }

    /** Keeps the random-count helper honest: the laggard's peers do differ from run to run. */
    @Test
    void theCountsAreRandom() {
        List<String> seen = new ArrayList<>();
        for (int i = 0; i < 3; i++) {
            seen.add(laggard(3).getFirst().pending().getFirst().commands().getFirst());
        }
        assertTrue(seen.stream().distinct().count() > 1, seen.toString());
    }
}
