package dev.jnccl.junit;

import dev.jnccl.CommunicatorAbortedException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicReferenceArray;
import org.opentest4j.AssertionFailedError;
import org.opentest4j.TestAbortedException;

/**
 * What the ranks of one invocation did, as JUnit's outcome. The bodies decide: every body returned
 * (also after catching an abort) means a pass. Otherwise the failing ranks are those whose body threw
 * something other than the pack's release ({@link CommunicatorAbortedException}), or, when every
 * error is a release, the rank whose failure the pack reported first (an injected fault, a watchdog).
 *
 * @param test     the test method, for messages
 * @param plan     the world
 * @param byRank   each rank's error (null: none)
 * @param returned how many bodies returned normally
 * @param joined   what the pack's join threw (null: nothing)
 */
record Outcome(String test, Plan plan, List<Throwable> byRank, int returned, Throwable joined) {
    static Outcome of(String test, Plan plan, AtomicReferenceArray<Throwable> errors, int returned, Throwable joined) {
        Throwable[] byRank = new Throwable[errors.length()];
        Arrays.setAll(byRank, errors::get);
        return new Outcome(test, plan, Arrays.asList(byRank), returned, joined);
    }

    /** Returns for a pass; throws the skip or the failure. */
    void check() {
        if (returned == plan.world() && (joined == null || joined instanceof CommunicatorAbortedException)) {
            return;
        }
        List<Integer> failing = failingRanks();
        if (failing.isEmpty()) {
            AssertionFailedError failure = new AssertionFailedError(plan.displayName() + " of " + test
                    + ": the pack failed outside the test method (its launch or close): " + joined, joined);
            attachOthers(failure, joined, Set.of());
            throw failure;
        }
        if (failing.stream().allMatch(rank -> byRank.get(rank) instanceof TestAbortedException)) {
            throw (TestAbortedException) byRank.get(failing.getFirst());
        }
        throw failure(failing);
    }

    private List<Integer> failingRanks() {
        List<Integer> own = new ArrayList<>();
        List<Integer> first = new ArrayList<>();
        for (int rank = 0; rank < byRank.size(); rank++) {
            Throwable error = byRank.get(rank);
            if (error != null && !(error instanceof CommunicatorAbortedException)) {
                own.add(rank);
            } else if (error != null && error == joined) {
                first.add(rank);
            }
        }
        return own.isEmpty() ? first : own;
    }

    private AssertionFailedError failure(List<Integer> failing) {
        StringBuilder message = new StringBuilder(plan.displayName()).append(" of ").append(test).append(": ")
                .append(failing.size() == 1 ? "rank " + failing.getFirst() + " failed" : failing.size() + " ranks failed");
        for (int rank : failing) {
            message.append("\n  rank ").append(rank).append(": ").append(byRank.get(rank));
        }
        long released = byRank.stream().filter(e -> e != null).count() - failing.size();
        if (released > 0) {
            message.append("\n  ").append(released).append(" other rank(s) were released by the pack; their errors are")
                    .append(" attached as suppressed");
        }
        Throwable cause = byRank.get(failing.getFirst());
        AssertionFailedError failure = new AssertionFailedError(message.toString(), cause);
        Set<Throwable> failingErrors = Collections.newSetFromMap(new IdentityHashMap<>());
        failing.forEach(rank -> failingErrors.add(byRank.get(rank)));
        attachOthers(failure, cause, failingErrors);
        return failure;
    }

    /**
     * Attaches every rank's error and the join's, except {@code cause} and what {@code cause} already
     * carries (the pack attaches the other ranks' errors to the first failure): each shows once.
     */
    private void attachOthers(AssertionFailedError failure, Throwable cause, Set<Throwable> failingErrors) {
        Set<Throwable> shown = Collections.newSetFromMap(new IdentityHashMap<>());
        shown.add(cause);
        if (cause != null) {
            shown.addAll(Arrays.asList(cause.getSuppressed()));
        }
        List<Throwable> candidates = new ArrayList<>(failingErrors);
        byRank.stream().filter(e -> e != null && !failingErrors.contains(e)).forEach(candidates::add);
        candidates.add(joined);
        for (Throwable error : candidates) {
            if (error != null && shown.add(error)) {
                failure.addSuppressed(error);
            }
        }
    }
}
