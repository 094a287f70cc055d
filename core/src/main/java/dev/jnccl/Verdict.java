package dev.jnccl;

import dev.jnccl.RankSummary.Activity;
import dev.jnccl.RankSummary.Status;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.StringJoiner;
import java.util.TreeSet;

/**
 * The verdict of a {@link Diagnosis}: a pure function from the ranks' summaries to one line that
 * names the culprit. The ranks join every collective together, so one rank's knowledge that a
 * transaction completed speaks for all: the hang is at or after the oldest transaction no rank knows
 * complete. A rank that never executed that one is the culprit (it is idle, so its own completion is
 * known exactly); else every rank executed it, and the culprit is the first transaction whose
 * commands differ between the ranks, else a rank held inside an enqueue, else NCCL or the transport
 * itself. With nothing pending anywhere, a rank behind the others, or one missing from the
 * host-side call the others are in, is the culprit.
 */
final class Verdict {
    /** Culprits named one by one; more are counted. */
    private static final int NAMED = 4;

    private Verdict() {}

    /**
     * The verdict.
     *
     * @param worldSize the number of ranks
     * @param summaries one per rank in rank order, or (a launcher with no channel) the diagnosing rank's only
     * @return one line
     */
    static String of(int worldSize, List<RankSummary> summaries) {
        if (summaries.isEmpty()) {
            throw new IllegalArgumentException("Verdict: no summary");
        }
        if (summaries.size() < worldSize) {
            return ownView(summaries.getFirst());
        }
        List<RankSummary> present = new ArrayList<>();
        List<RankSummary> absent = new ArrayList<>();
        for (RankSummary summary : summaries) {
            (summary.status() == Status.ABSENT ? absent : present).add(summary);
        }
        if (present.isEmpty()) {
            return culprits(absent, List.of(), 0, "");
        }
        long mostExecuted = present.stream().mapToLong(RankSummary::executed).max().orElseThrow();
        long fewestExecuted = present.stream().mapToLong(RankSummary::executed).min().orElseThrow();
        long oldest = present.stream().mapToLong(RankSummary::completed).max().orElseThrow() + 1;
        if (oldest <= mostExecuted) {
            return transaction(oldest, fewestExecuted, present, absent);
        }
        List<RankSummary> behind = present.stream().filter(s -> s.executed() < mostExecuted).toList();
        if (!absent.isEmpty() || !behind.isEmpty()) {
            return culprits(absent, behind, 0, "");
        }
        return hostSide(present);
    }

    /**
     * Transaction {@code oldest} is executed by some rank and known complete by none: a rank that never
     * executed it is the culprit. Else every rank executed {@code oldest} to {@code newest} and none
     * knows them complete (the watchdog's probes may lag): the first whose commands differ, else a rank
     * held inside an enqueue, else NCCL or the transport is stuck.
     */
    private static String transaction(long oldest, long newest, List<RankSummary> present, List<RankSummary> absent) {
        List<RankSummary> behind = present.stream().filter(s -> s.executed() < oldest).toList();
        if (!absent.isEmpty() || !behind.isEmpty()) {
            return culprits(absent, behind, oldest, "");
        }
        for (long number : listed(present, oldest, newest)) {
            Map<List<String>, List<Integer>> versions = versions(present, number);
            if (versions.size() > 1) {
                return differs(number, versions);
            }
        }
        Map<List<String>, List<Integer>> versions = versions(present, oldest);
        String what = versions.isEmpty() ? "" : " (" + String.join(", ", versions.keySet().iterator().next()) + ")";
        // Held in the enqueue of the newest transaction every rank executed: counted, not yet in the flight
        // recorder (a rank that runs ahead, enqueuing a later one, is no culprit).
        List<RankSummary> held = present.stream().filter(s -> s.activity() == Activity.ENQUEUE
                && s.executed() == newest && commandsOf(s, newest) == null).toList();
        String every = present.size() == 1 ? "the only rank" : "every rank";
        if (!held.isEmpty() && held.size() < present.size()) {
            return ranks(held) + (held.size() == 1 ? " is" : " are") + " held inside the enqueue of transaction #"
                    + held.getFirst().executed() + " while the other ranks wait: NCCL or the transport does not return"
                    + " on " + (held.size() == 1 ? "it" : "them");
        }
        if (!held.isEmpty()) {
            return every + " is held inside the enqueue of a transaction: NCCL or the transport does not return";
        }
        boolean same = present.size() > 1 && !versions.isEmpty()
                && versions.values().iterator().next().size() == present.size();
        return every + " is inside transaction" + (oldest == newest ? " #" + oldest : "s #" + oldest + " to #" + newest
                + " (none known complete)") + (same ? " with the same commands" : "") + ": NCCL or the transport is stuck"
                + what;
    }

    /** The pending transactions any rank lists from {@code oldest} to {@code newest}, in order. */
    private static Set<Long> listed(List<RankSummary> present, long oldest, long newest) {
        Set<Long> numbers = new TreeSet<>();
        for (RankSummary summary : present) {
            for (RankSummary.Pending pending : summary.pending()) {
                if (pending.transaction() >= oldest && pending.transaction() <= newest) {
                    numbers.add(pending.transaction());
                }
            }
        }
        return numbers;
    }

    /** The ranks that list transaction {@code number} as pending, by its commands. */
    private static Map<List<String>, List<Integer>> versions(List<RankSummary> present, long number) {
        Map<List<String>, List<Integer>> versions = new LinkedHashMap<>();
        for (RankSummary summary : present) {
            List<String> commands = commandsOf(summary, number);
            if (commands != null) {
                versions.computeIfAbsent(commands, c -> new ArrayList<>()).add(summary.rank());
            }
        }
        return versions;
    }

    /** The commands of transaction {@code number} on a rank that has it pending, or null. */
    private static List<String> commandsOf(RankSummary summary, long number) {
        for (RankSummary.Pending pending : summary.pending()) {
            if (pending.transaction() == number) {
                return pending.commands();
            }
        }
        return null;
    }

    /** "transaction #41 differs: ranks 0,1,3 X, rank 2 Y", the largest group first, at the first command that differs. */
    private static String differs(long number, Map<List<String>, List<Integer>> versions) {
        List<Map.Entry<List<String>, List<Integer>>> groups = new ArrayList<>(versions.entrySet());
        groups.sort(Comparator.comparingInt((Map.Entry<List<String>, List<Integer>> e) -> -e.getValue().size())
                .thenComparingInt(e -> e.getValue().getFirst()));
        int longest = groups.stream().mapToInt(e -> e.getKey().size()).max().orElse(0);
        int at = 0;
        while (at < longest && sameAt(groups, at)) {
            at++;
        }
        StringJoiner text = new StringJoiner(", ", "transaction #" + number + " differs"
                + (longest > 1 ? " at command " + (at + 1) : "") + ": ", "");
        for (Map.Entry<List<String>, List<Integer>> group : groups) {
            List<String> commands = group.getKey();
            text.add(ranks(group.getValue()) + " " + (at < commands.size() ? commands.get(at)
                    : "nothing (" + commands.size() + " command(s))"));
        }
        return text.toString();
    }

    private static boolean sameAt(List<Map.Entry<List<String>, List<Integer>>> groups, int at) {
        List<String> first = groups.getFirst().getKey();
        String expected = at < first.size() ? first.get(at) : null;
        for (Map.Entry<List<String>, List<Integer>> group : groups) {
            List<String> commands = group.getKey();
            String actual = at < commands.size() ? commands.get(at) : null;
            if (expected == null ? actual != null : !expected.equals(actual)) {
                return false;
            }
        }
        return true;
    }

    /**
     * Nothing is pending anywhere and every rank executed as many: the host-side call some ranks are in.
     * A rank inside an enqueue that is not counted yet waits at the transport's host side for its peers
     * (threads mode's copy engines meet there before anything is enqueued): it is in the next transaction.
     */
    private static String hostSide(List<RankSummary> present) {
        Map<String, Integer> calls = new LinkedHashMap<>();
        for (RankSummary summary : present) {
            if (inCall(summary)) {
                calls.merge(summary.call(), 1, Integer::sum);
            }
        }
        long executed = present.getFirst().executed();
        if (calls.isEmpty()) {
            return "no culprit in the summaries: every rank executed " + executed + " transaction(s), none is pending"
                    + " and none is in a host-side call";
        }
        String call = calls.entrySet().stream().max(Comparator.comparingInt(Map.Entry::getValue)).orElseThrow()
                .getKey();
        List<RankSummary> elsewhere = present.stream().filter(s -> !inCall(s) || !s.call().equals(call)).toList();
        boolean enqueue = present.stream().anyMatch(s -> s.activity() == Activity.ENQUEUE && s.call().equals(call));
        if (elsewhere.isEmpty()) {
            return "every rank is in " + call + " after " + executed + " transaction(s): the host side is stuck";
        }
        return enqueue ? culprits(List.of(), elsewhere, executed + 1, "") : culprits(List.of(), elsewhere, 0, call);
    }

    /** Whether a rank waits in a host-side call or inside an enqueue (see {@link #hostSide}). */
    private static boolean inCall(RankSummary summary) {
        return summary.activity() == Activity.HOST_CALL || summary.activity() == Activity.ENQUEUE;
    }

    /**
     * The culprits, each as a clause: ranks that gave no summary, ranks that left, ranks that never
     * reached transaction {@code stuck} (0: the one after their last) or host-side call {@code call}.
     */
    private static String culprits(List<RankSummary> absent, List<RankSummary> behind, long stuck, String call) {
        List<String> clauses = new ArrayList<>();
        for (RankSummary summary : absent) {
            clauses.add("rank " + summary.rank() + " gave no summary: " + RankSummary.firstLine(summary.detail()));
        }
        for (RankSummary summary : behind) {
            clauses.add(behind(summary, call.isEmpty() ? "transaction #" + (stuck > 0 ? stuck : summary.executed() + 1)
                    : call));
        }
        StringJoiner text = new StringJoiner("; ");
        clauses.stream().limit(NAMED).forEach(text::add);
        if (clauses.size() > NAMED) {
            text.add("and " + (clauses.size() - NAMED) + " more rank(s)");
        }
        return text.toString();
    }

    private static String behind(RankSummary summary, String target) {
        String rank = "rank " + summary.rank();
        String after = " after " + summary.executed() + " transaction(s)";
        return switch (summary.status()) {
            case CLOSING, CLOSED -> rank + " closed its communicator" + after
                    + (summary.detail().isEmpty() ? "" : " (" + RankSummary.firstLine(summary.detail()) + ")");
            case ABORTED -> rank + " was aborted" + after + ": " + RankSummary.firstLine(summary.detail());
            default -> rank + " never reached " + target + " (" + doing(summary) + ")";
        };
    }

    /** The rank's view alone: what it executed, what is pending and where its thread is. */
    private static String ownView(RankSummary own) {
        String view = "rank " + own.rank() + "'s view only (no channel to the other ranks): ";
        if (own.pending().isEmpty()) {
            return view + "it executed " + own.executed() + " transaction(s), none pending; " + doing(own);
        }
        RankSummary.Pending oldest = own.pending().getFirst();
        return view + "transaction #" + oldest.transaction() + " is not complete (" + String.join(", ",
                oldest.commands()) + "); " + doing(own);
    }

    /** What a rank's thread does, as a clause: "it is in user code: at Trainer.step(Trainer.java:88)". */
    static String doing(RankSummary summary) {
        String at = summary.location().isEmpty() ? "" : ", called at " + summary.location();
        return switch (summary.activity()) {
            case USER_CODE -> "it is in user code" + (summary.location().isEmpty() ? "" : ": at " + summary.location());
            case ENQUEUE -> "it is enqueuing a transaction in " + summary.call() + at;
            case WAIT -> "it waits in " + summary.call() + at;
            case HOST_CALL -> "it is in " + summary.call() + at;
            case CLOSE -> "it is closing its communicator" + at;
            case ENDED -> "its thread has ended";
            case UNKNOWN -> "what its thread does is unknown";
        };
    }

    /** "rank 2" or "ranks 0,1,3". */
    private static String ranks(List<?> ranks) {
        StringJoiner joined = new StringJoiner(",", ranks.size() == 1 ? "rank " : "ranks ", "");
        for (Object rank : ranks) {
            joined.add(String.valueOf(rank instanceof RankSummary s ? s.rank() : rank));
        }
        return joined.toString();
    }
}
