package dev.jnccl;

import dev.jnccl.RankSummary.Activity;
import dev.jnccl.RankSummary.Status;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;

/**
 * The offline diagnosis of a job (the role of PyTorch's flight recorder {@code fr_trace} tool):
 * {@code scripts/diagnose.sh FOLDER}, or {@code java -cp jnccl-core.jar dev.jnccl.DiagnoseDumps FOLDER},
 * reads every rank's {@link DiagnosisDump} in the folder, rebuilds the summaries, runs the same
 * {@link Verdict} as a live diagnosis and prints it with a table of the ranks. A rank that left no file
 * (its process died before its watchdog saw a hang, or was ended with the job) is described by the
 * summary another rank's diagnosis holds of it, else named as a rank that gave no summary.
 * Exit status 0 with a verdict, 2 when the folder holds no dump or a file is not one.
 */
final class DiagnoseDumps {
    /** Why a rank without a file gave no summary: the clause after "gave no summary: ". */
    static final String NO_FILE = "it left no file (its process died before its watchdog saw a hang, or the job"
            + " ended it first)";

    private DiagnoseDumps() {}

    /**
     * The command line.
     *
     * @param args the folder
     */
    public static void main(String[] args) {
        if (args.length != 1) {
            System.err.println("usage: diagnose FOLDER  (the folder of jnccl.diagnosis.dir, holding jnccl-rank-R-of-W.json"
                    + " files)");
            System.exit(2);
        }
        try {
            System.out.print(merge(Path.of(args[0])).report());
        } catch (IOException | IllegalArgumentException e) {
            System.err.println("diagnose: " + e.getMessage());
            System.exit(2);
        }
    }

    /**
     * What the files of one folder say together.
     *
     * @param folder    the folder
     * @param files     the ranks' dumps, by rank
     * @param summaries one per rank, in rank order
     * @param sources   where each rank's summary came from, in rank order
     * @param verdict   the verdict of the summaries
     */
    record Merged(Path folder, Map<Integer, DiagnosisDump> files, List<RankSummary> summaries, List<String> sources,
                  String verdict) {
        /** {@return the verdict, the table of the ranks, the verdicts the files hold and why each was written} */
        String report() {
            int world = summaries.size();
            StringBuilder out = new StringBuilder("verdict: ").append(verdict).append('\n');
            out.append(files.size()).append(" of ").append(world).append(" rank(s) left a file in ").append(folder)
                    .append('\n');
            out.append(String.format(Locale.ROOT, "%4s  %-24s %-8s %8s %9s  %-40s %s%n", "rank", "summary from",
                    "status", "executed", "completed", "oldest pending", "doing"));
            for (int r = 0; r < world; r++) {
                out.append(row(summaries.get(r), sources.get(r))).append('\n');
            }
            for (DiagnosisDump dump : files.values()) {
                out.append("rank ").append(dump.summary().rank()).append("'s file: ").append(dump.written()).append(", ")
                        .append(dump.trigger());
                if (!dump.reason().isEmpty()) {
                    out.append(" (").append(RankSummary.firstLine(dump.reason())).append(')');
                }
                if (dump.diagnosis() != null) {
                    out.append("; its verdict: ").append(dump.diagnosis().verdict());
                }
                out.append('\n');
            }
            return out.toString();
        }

        private static String row(RankSummary s, String source) {
            boolean absent = s.status() == Status.ABSENT;
            String pending = s.pending().isEmpty() ? "-" : "#" + s.pending().getFirst().transaction() + " "
                    + String.join("; ", s.pending().getFirst().commands())
                    + (s.pending().size() > 1 ? " (+" + (s.pending().size() - 1) + ")" : "");
            return String.format(Locale.ROOT, "%4d  %-24s %-8s %8s %9s  %-40s %s", s.rank(), source,
                    s.status().name().toLowerCase(Locale.ROOT), absent ? "-" : Long.toString(s.executed()),
                    absent ? "-" : Long.toString(s.completed()), pending, absent ? s.detail() : Verdict.doing(s));
        }
    }

    /**
     * Reads the dumps of {@code folder} and makes the verdict.
     *
     * @throws IllegalArgumentException when the folder holds no dump, a file is not one, or the files
     *                                  disagree on the world size
     */
    static Merged merge(Path folder) throws IOException {
        Map<Integer, DiagnosisDump> files = read(folder);
        int world = files.values().iterator().next().summary().worldSize();
        List<RankSummary> summaries = new ArrayList<>();
        List<String> sources = new ArrayList<>();
        for (int r = 0; r < world; r++) {
            DiagnosisDump own = files.get(r);
            RankSummary told = own != null ? null : toldByPeer(files, r);
            if (own != null) {
                summaries.add(own.summary());
                sources.add("its file");
            } else if (told != null) {
                summaries.add(told);
                sources.add("no file; a peer's diagnosis");
            } else {
                summaries.add(new RankSummary(r, world, Status.ABSENT, NO_FILE, 0, 0, List.of(), Activity.UNKNOWN, "",
                        "", "", List.of()));
                sources.add("no file");
            }
        }
        return new Merged(folder, files, summaries, sources, Verdict.of(world, summaries));
    }

    /** Every dump in {@code folder}, by rank; all of one world size. */
    private static Map<Integer, DiagnosisDump> read(Path folder) throws IOException {
        if (!Files.isDirectory(folder)) {
            throw new IllegalArgumentException(folder + " is not a folder");
        }
        Map<Integer, DiagnosisDump> files = new TreeMap<>();
        List<Path> paths;
        try (Stream<Path> listed = Files.list(folder)) {
            paths = listed.filter(p -> DiagnosisDump.rankOfName(p.getFileName().toString()) != null).sorted().toList();
        }
        for (Path path : paths) {
            DiagnosisDump dump = DiagnosisDump.read(path);
            int[] named = DiagnosisDump.rankOfName(path.getFileName().toString());
            if (dump.summary().rank() != named[0] || dump.summary().worldSize() != named[1]) {
                throw new IllegalArgumentException(path + " holds rank " + dump.summary().rank() + " of "
                        + dump.summary().worldSize() + ", not the rank its name says");
            }
            int world = files.isEmpty() ? named[1] : files.values().iterator().next().summary().worldSize();
            if (named[1] != world) {
                throw new IllegalArgumentException(folder + " holds dumps of world sizes " + world + " and " + named[1]
                        + ": one job's files per folder");
            }
            files.put(named[0], dump);
        }
        if (files.isEmpty()) {
            throw new IllegalArgumentException("no jnccl-rank-R-of-W.json file in " + folder);
        }
        return files;
    }

    /** The summary of rank {@code rank} in a diagnosis another rank's file holds (one that answered), or null. */
    private static RankSummary toldByPeer(Map<Integer, DiagnosisDump> files, int rank) {
        for (DiagnosisDump dump : files.values()) {
            if (dump.diagnosis() == null) {
                continue;
            }
            for (RankSummary summary : dump.diagnosis().summaries()) {
                if (summary.rank() == rank && summary.status() != Status.ABSENT
                        && summary.worldSize() == dump.summary().worldSize()) {
                    return summary;
                }
            }
        }
        return null;
    }
}
