package dev.jnccl;

import dev.jnccl.CommandFingerprints.Entry;
import dev.jnccl.CommandFingerprints.Field;
import dev.jnccl.CommandFingerprints.Fingerprint;
import dev.jnccl.spi.Command.Kind;
import dev.jnccl.spi.Command.Shape;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.Function;

/**
 * The words of the consistency check's verdicts: which collective or send differs, in what, and
 * what each group of ranks called, e.g. {@code the count of collective 1 differs: rank 1
 * all-reduces 4095 FP32 with SUM; ranks 0 and 2 all-reduce 4096 FP32 with SUM}. Groups go from the
 * smallest (the likely culprits) to the largest, ties by their lowest rank, so every rank writes
 * the same line.
 */
final class Verdicts {
    private Verdicts() {}

    /**
     * {@return what the work is called: its label when every rank gives the same, else each label
     * with its ranks, in rank order ("replay of graph #12 on rank 0, replay of graph #15 on rank 1, ...":
     * graph ids differ between ranks)}
     */
    static String subject(List<Fingerprint> all) {
        List<List<Integer>> groups = groups(all.size(), r -> all.get(r).label());
        if (groups.size() == 1) {
            return all.getFirst().label();
        }
        groups.sort(Comparator.comparingInt(List::getFirst));
        List<String> parts = new ArrayList<>();
        for (List<Integer> group : groups) {
            parts.add(all.get(group.getFirst()).label() + " on " + ranks(group));
        }
        return String.join(", ", parts);
    }

    /** {@return the verdict on the collectives, position by position, or null when they match} */
    static String collectives(List<Fingerprint> all) {
        List<List<Entry>> lists = all.stream().map(Fingerprint::collectives).toList();
        int longest = lists.stream().mapToInt(List::size).max().orElse(0);
        for (int i = 0; i < longest; i++) {
            int position = i;
            List<Entry> here = lists.stream().map(l -> position < l.size() ? l.get(position) : null).toList();
            String found = here.contains(null) ? missing(here, i + 1) : differing(here, i + 1);
            if (found != null) {
                return found;
            }
        }
        return null;
    }

    private static String missing(List<Entry> here, int position) {
        return "the number of collectives differs: " + describeGroups(here, (entry, plural) -> entry == null
                ? (plural ? "have" : "has") + " no collective " + position : phrase(entry, plural));
    }

    private static String differing(List<Entry> here, int position) {
        List<Field> fields = Field.differing(here);
        if (fields.isEmpty()) {
            return here.getFirst().kind().shape() == Shape.COUNTED ? unevenCounts(here, position) : null;
        }
        List<String> words = fields.stream().map(f -> f.word).toList();
        String named = words.size() == 1 ? words.getFirst()
                : String.join(", ", words.subList(0, words.size() - 1)) + " and " + words.getLast();
        return "the " + named + " of collective " + position + (fields.equals(List.of(Field.COUNTS)) || fields.size() > 1 ? " differ: " : " differs: ")
                + describeGroups(here, Verdicts::phrase);
    }

    /** The uneven all-to-all: rank r's count to p must be p's count from r. */
    private static String unevenCounts(List<Entry> here, int position) {
        for (int r = 0; r < here.size(); r++) {
            for (int p = 0; p < here.size(); p++) {
                long sent = here.get(r).sendCounts()[p];
                long received = here.get(p).recvCounts()[r];
                if (sent != received) {
                    DType dtype = here.get(r).dtype();
                    return "the counts of collective " + position + " (an uneven all-to-all) differ: rank " + r
                            + " sends " + sent + " " + dtype + " to rank " + p + "; rank " + p + " receives "
                            + received + " " + dtype + " from rank " + r;
                }
            }
        }
        return null;
    }

    /** {@return the verdict on the sends and receives, pair by pair of ranks, or null when they match} */
    static String pointToPoint(List<Fingerprint> all) {
        for (int r = 0; r < all.size(); r++) {
            for (int p = 0; p < all.size(); p++) {
                String found = pair(r, all.get(r).pointToPoint(Kind.SEND, p), p, all.get(p).pointToPoint(Kind.RECV, r));
                if (found != null) {
                    return found;
                }
            }
        }
        return null;
    }

    /** Rank {@code from}'s sends to {@code to} against {@code to}'s receives from {@code from}, in order. */
    private static String pair(int from, List<Entry> sends, int to, List<Entry> receives) {
        for (int i = 0; i < Math.min(sends.size(), receives.size()); i++) {
            Entry send = sends.get(i);
            Entry receive = receives.get(i);
            if (send.count() != receive.count() || send.dtype() != receive.dtype()) {
                String field = send.dtype() != receive.dtype() ? (send.count() != receive.count() ? "count and dtype"
                        : "dtype") : "count";
                return "the " + field + " of send " + (i + 1) + " from rank " + from + " to rank " + to
                        + (field.contains(" and ") ? " differ: " : " differs: ") + "rank " + from + " sends "
                        + send.count() + " " + send.dtype() + "; rank " + to + " receives " + receive.count() + " "
                        + receive.dtype();
            }
        }
        if (sends.size() != receives.size()) {
            return "the number of sends from rank " + from + " to rank " + to + " differs: rank " + from + " sends "
                    + times(sends.size()) + " to rank " + to + "; rank " + to + " receives " + times(receives.size())
                    + " from rank " + from;
        }
        return null;
    }

    private static String times(int n) {
        return n == 1 ? "once" : n + " times";
    }

    // ------------------------------------------------------------------ words

    /** How one group's value is written: singular ("rank 1 all-reduces") or plural ("ranks 0 and 2 all-reduce"). */
    @FunctionalInterface
    private interface Phrase {
        String of(Entry entry, boolean plural);
    }

    /** {@return "rank 1 all-reduces ...; ranks 0 and 2 all-reduce ..."}: ranks grouped by equal entries */
    private static String describeGroups(List<Entry> here, Phrase phrase) {
        List<List<Integer>> groups = groups(here.size(), r -> new Key(here.get(r)));
        List<String> parts = new ArrayList<>();
        for (List<Integer> group : groups) {
            parts.add(ranks(group) + " " + phrase.of(here.get(group.getFirst()), group.size() > 1));
        }
        return String.join("; ", parts);
    }

    /** An entry as a grouping key: equal when NCCL would see the same call (or both absent). */
    private record Key(Entry entry) {
        @Override
        public boolean equals(Object other) {
            return other instanceof Key key && (entry == null ? key.entry == null : entry.sameCollective(key.entry));
        }

        @Override
        public int hashCode() {
            return entry == null ? 0 : Objects.hash(entry.kind(), entry.dtype(), entry.count());
        }
    }

    /**
     * {@return ranks {@code 0..n-1} grouped by {@code key}, smallest group first (ties: lowest rank
     * first), so the largest, the ranks that agree, comes last}
     */
    private static List<List<Integer>> groups(int n, Function<Integer, Object> key) {
        Map<Object, List<Integer>> byKey = new LinkedHashMap<>();
        for (int r = 0; r < n; r++) {
            byKey.computeIfAbsent(key.apply(r), k -> new ArrayList<>()).add(r);
        }
        List<List<Integer>> groups = new ArrayList<>(byKey.values());
        groups.sort(Comparator.<List<Integer>>comparingInt(List::size).thenComparingInt(List::getFirst));
        return groups;
    }

    /** {@return "rank 1", "ranks 0 and 2", "ranks 0 to 5 and 7"} */
    static String ranks(List<Integer> ranks) {
        List<String> runs = new ArrayList<>();
        for (int i = 0; i < ranks.size(); ) {
            int j = i;
            while (j + 1 < ranks.size() && ranks.get(j + 1) == ranks.get(j) + 1) {
                j++;
            }
            if (j - i >= 2) {
                runs.add(ranks.get(i) + " to " + ranks.get(j));
            } else {
                for (int k = i; k <= j; k++) {
                    runs.add(String.valueOf(ranks.get(k)));
                }
            }
            i = j + 1;
        }
        String listed = runs.size() == 1 ? runs.getFirst()
                : String.join(", ", runs.subList(0, runs.size() - 1)) + " and " + runs.getLast();
        return (ranks.size() == 1 ? "rank " : "ranks ") + listed;
    }

    /** {@return what a rank (or several) called: "all-reduces 4096 FP32 with SUM", "broadcast 4096 FP32 from rank 0"} */
    static String phrase(Entry entry, boolean plural) {
        Kind kind = entry.kind();
        StringBuilder sb = new StringBuilder(verb(kind, plural)).append(' ');
        switch (kind.shape()) {
            case SCATTERED, GATHERED -> sb.append(entry.count()).append(' ').append(entry.dtype()).append(" per rank");
            case COUNTED -> sb.append(entry.dtype()).append(" (uneven, counts sent ")
                    .append(Arrays.toString(entry.sendCounts())).append(", received ")
                    .append(Arrays.toString(entry.recvCounts())).append(')');
            case BLOCKS -> sb.append(entry.dtype()).append(" blocks of ").append(Arrays.toString(entry.recvCounts()));
            default -> sb.append(entry.count()).append(' ').append(entry.dtype());
        }
        if (entry.op() != null) {
            sb.append(" with ").append(entry.op());
        }
        if (kind == Kind.BROADCAST || kind == Kind.SCATTER) {
            sb.append(" from rank ").append(entry.target());
        } else if (kind == Kind.REDUCE || kind == Kind.GATHER) {
            sb.append(" to rank ").append(entry.target());
        }
        return sb.toString();
    }

    private static String verb(Kind kind, boolean plural) {
        String s = plural ? "" : "s";
        return switch (kind) {
            case ALL_REDUCE -> "all-reduce" + s;
            case REDUCE_SCATTER -> "reduce-scatter" + s;
            case ALL_GATHER, ALL_GATHER_V -> "all-gather" + s;
            case BROADCAST -> "broadcast" + s;
            case REDUCE -> "reduce" + s;
            case GATHER -> "gather" + s;
            case SCATTER -> "scatter" + s;
            case ALL_TO_ALL, UNEVEN_ALL_TO_ALL -> "exchange" + s + " all-to-all";
            case DESTRUCTIVE_ALL_TO_ALL -> "exchange" + s + " all-to-all in place";
            case SEND -> "send" + s;
            case RECV -> "receive" + s;
        };
    }
}
