package dev.jnccl;

import dev.jnccl.RankSummary.Activity;
import dev.jnccl.RankSummary.Status;
import dev.jnccl.internal.Json;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One rank's diagnosis dump, the file {@code jnccl-rank-R-of-W.json} that a rank writes when its
 * watchdog first sees a hang and again when its communicator is aborted
 * ({@link CommunicatorOptions#withDiagnosisDirectory}), and that {@link DiagnoseDumps} merges offline:
 * its {@link RankSummary}, its flight recorder's recent transactions, and the diagnosis it knows. The
 * JSON is written and read here alone, so that the format has one definition.
 *
 * @param summary        the rank's summary when the file was written (for an abort that followed a
 *                       diagnosis, as it was just before: the state the verdict was made from)
 * @param written        when, as an ISO-8601 instant
 * @param trigger        why it was written: the first sign of a hang, or the abort
 * @param reason         the abort's reason, empty before an abort
 * @param flightRecorder the flight recorder's dump, one line per element
 * @param diagnosis      the diagnosis the rank knew (its own or a peer's), or null
 */
record DiagnosisDump(RankSummary summary, String written, String trigger, String reason, List<String> flightRecorder,
                     Diagnosis diagnosis) {
    /** What the file says it is, so that the reader refuses other JSON files. */
    static final String FORMAT = "jnccl diagnosis dump";
    /** The format's version: a reader refuses other versions. */
    static final long VERSION = 1;
    /** The file names: {@code jnccl-rank-R-of-W.json}. */
    static final Pattern NAME = Pattern.compile("jnccl-rank-(\\d+)-of-(\\d+)\\.json");

    /** Copies the lists. */
    DiagnosisDump {
        flightRecorder = List.copyOf(flightRecorder);
    }

    /** {@return the file's name in its folder} */
    String fileName() {
        return "jnccl-rank-" + summary.rank() + "-of-" + summary.worldSize() + ".json";
    }

    /**
     * Writes the file into {@code folder} (made when missing) atomically: a temporary file in the same
     * folder, then a move over the old one, so that a reader, or a process killed meanwhile, never
     * leaves half a file.
     *
     * @return the file
     */
    Path write(Path folder) throws IOException {
        Files.createDirectories(folder);
        Path target = folder.resolve(fileName());
        Path temporary = Files.createTempFile(folder, "." + fileName(), ".tmp");
        try {
            Files.writeString(temporary, Json.write(toJson()), StandardCharsets.UTF_8);
            try {
                Files.move(temporary, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } catch (AtomicMoveNotSupportedException e) {
                Files.move(temporary, target, StandardCopyOption.REPLACE_EXISTING);
            }
        } finally {
            Files.deleteIfExists(temporary);
        }
        return target;
    }

    /**
     * Reads a file {@link #write} wrote.
     *
     * @throws IOException              when it cannot be read
     * @throws IllegalArgumentException when it is no dump of this format, naming the file and what is wrong
     */
    static DiagnosisDump read(Path file) throws IOException {
        String text = Files.readString(file, StandardCharsets.UTF_8);
        try {
            Map<?, ?> json = (Map<?, ?>) Json.read(text);
            if (!FORMAT.equals(json.get("format")) || !Long.valueOf(VERSION).equals(json.get("version"))) {
                throw new IllegalArgumentException("not a \"" + FORMAT + "\" of version " + VERSION + " (format "
                        + json.get("format") + ", version " + json.get("version") + ")");
            }
            Object diagnosis = json.get("diagnosis");
            return new DiagnosisDump(summary(map(json, "summary")), string(json, "written"), string(json, "trigger"),
                    string(json, "reason"), strings(json, "flightRecorder"),
                    diagnosis == null ? null : diagnosis((Map<?, ?>) diagnosis));
        } catch (ClassCastException | NullPointerException | IllegalArgumentException e) {
            throw new IllegalArgumentException(file + ": " + (e.getMessage() == null ? e.toString() : e.getMessage()), e);
        }
    }

    /** {@return the rank and world size a file name says, or null when it is no dump's name} */
    static int[] rankOfName(String fileName) {
        Matcher m = NAME.matcher(fileName);
        return m.matches() ? new int[] {Integer.parseInt(m.group(1)), Integer.parseInt(m.group(2))} : null;
    }

    private Map<String, Object> toJson() {
        Map<String, Object> json = new LinkedHashMap<>();
        json.put("format", FORMAT);
        json.put("version", VERSION);
        json.put("rank", summary.rank());
        json.put("worldSize", summary.worldSize());
        json.put("written", written);
        json.put("trigger", trigger);
        json.put("reason", reason);
        json.put("verdict", diagnosis == null ? null : diagnosis.verdict());
        json.put("summary", json(summary));
        json.put("flightRecorder", flightRecorder);
        json.put("diagnosis", diagnosis == null ? null : json(diagnosis));
        return json;
    }

    private static Map<String, Object> json(Diagnosis diagnosis) {
        Map<String, Object> json = new LinkedHashMap<>();
        json.put("verdict", diagnosis.verdict());
        json.put("complete", diagnosis.complete());
        json.put("summaries", diagnosis.summaries().stream().map(DiagnosisDump::json).toList());
        return json;
    }

    private static Diagnosis diagnosis(Map<?, ?> json) {
        List<RankSummary> summaries = new ArrayList<>();
        for (Object summary : (List<?>) json.get("summaries")) {
            summaries.add(summary((Map<?, ?>) summary));
        }
        return new Diagnosis(string(json, "verdict"), summaries, (Boolean) json.get("complete"));
    }

    private static Map<String, Object> json(RankSummary summary) {
        Map<String, Object> json = new LinkedHashMap<>();
        json.put("rank", summary.rank());
        json.put("worldSize", summary.worldSize());
        json.put("status", summary.status().name());
        json.put("detail", summary.detail());
        json.put("executed", summary.executed());
        json.put("completed", summary.completed());
        List<Object> pending = new ArrayList<>();
        for (RankSummary.Pending p : summary.pending()) {
            Map<String, Object> entry = new LinkedHashMap<>();
            entry.put("transaction", p.transaction());
            entry.put("commands", p.commands());
            pending.add(entry);
        }
        json.put("pending", pending);
        json.put("activity", summary.activity().name());
        json.put("call", summary.call());
        json.put("thread", summary.thread());
        json.put("location", summary.location());
        json.put("stack", summary.stack());
        return json;
    }

    private static RankSummary summary(Map<?, ?> json) {
        List<RankSummary.Pending> pending = new ArrayList<>();
        for (Object p : (List<?>) json.get("pending")) {
            Map<?, ?> entry = (Map<?, ?>) p;
            pending.add(new RankSummary.Pending(number(entry, "transaction"), strings(entry, "commands")));
        }
        return new RankSummary((int) number(json, "rank"), (int) number(json, "worldSize"),
                Status.valueOf(string(json, "status")), string(json, "detail"), number(json, "executed"),
                number(json, "completed"), pending, Activity.valueOf(string(json, "activity")), string(json, "call"),
                string(json, "thread"), string(json, "location"), strings(json, "stack"));
    }

    private static Map<?, ?> map(Map<?, ?> json, String member) {
        return (Map<?, ?>) required(json, member);
    }

    private static String string(Map<?, ?> json, String member) {
        return (String) required(json, member);
    }

    private static long number(Map<?, ?> json, String member) {
        return (Long) required(json, member);
    }

    private static List<String> strings(Map<?, ?> json, String member) {
        List<String> strings = new ArrayList<>();
        for (Object element : (List<?>) required(json, member)) {
            strings.add((String) element);
        }
        return strings;
    }

    private static Object required(Map<?, ?> json, String member) {
        Object value = json.get(member);
        if (value == null) {
            throw new IllegalArgumentException("the member \"" + member + "\" is missing");
        }
        return value;
    }
}
