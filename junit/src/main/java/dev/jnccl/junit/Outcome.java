package dev.jnccl.junit;

import dev.jnccl.CommunicatorAbortedException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.OptionalInt;
import java.util.concurrent.atomic.AtomicReferenceArray;
import org.opentest4j.AssertionFailedError;
import org.opentest4j.TestAbortedException;

/**
 * What the ranks of one invocation did, as JUnit's outcome. The bodies decide: every body returned
 * (also after catching an abort) means a pass. Otherwise the failing ranks are those whose body threw
 * something other than the pack's release ({@link CommunicatorAbortedException}), or, when every
 * error is a release, the rank to blame (an injected fault's, else the one the pack reported first),
 * or, when that rank caught its failure and returned, every rank that threw.
 *
 * @param test        the test method, for messages
 * @param plan        the world
 * @param byRank      what each rank's test method threw (null: nothing)
 * @param returned    how many bodies returned normally
 * @param joined      what the pack's join threw (null: nothing)
 * @param firstFailed the rank to blame when every error is a release (the fault's, else the pack's first)
 * @param closeErrors the ranks' failed closes
 */
record Outcome(String test, Plan plan, List<Throwable> byRank, int returned, Throwable joined,
               OptionalInt firstFailed, List<Throwable> closeErrors) {
    static Outcome of(String test, Plan plan, AtomicReferenceArray<Throwable> errors, int returned, Throwable joined,
                      OptionalInt firstFailed, List<Throwable> closeErrors) {
        Throwable[] byRank = new Throwable[errors.length()];
        Arrays.setAll(byRank, errors::get);
        return new Outcome(test, plan, Arrays.asList(byRank), returned, joined, firstFailed, closeErrors);
    }

    /** Returns for a pass; throws the skip or the failure. */
    void check() {
        if (returned == plan.world() && (joined == null || joined instanceof CommunicatorAbortedException)
                && closeErrors.isEmpty()) {
            return;
        }
        List<Integer> failing = failingRanks();
        if (failing.isEmpty()) {
            // Nothing of the test method failed: the pack's launch, a communicator's init or a close did.
            throw new AssertionFailedError(plan.displayName() + " of " + test + ": the pack failed outside the test"
                    + " method: " + joined, joined);
        }
        if (failing.stream().allMatch(rank -> byRank.get(rank) instanceof TestAbortedException)) {
            throw (TestAbortedException) byRank.get(failing.getFirst());
        }
        throw failure(failing);
    }

    private List<Integer> failingRanks() {
        List<Integer> own = new ArrayList<>();
        for (int rank = 0; rank < byRank.size(); rank++) {
            Throwable error = byRank.get(rank);
            if (error != null && !(error instanceof CommunicatorAbortedException)) {
                own.add(rank);
            }
        }
        if (own.isEmpty() && firstFailed.isPresent() && byRank.get(firstFailed.getAsInt()) != null) {
            own.add(firstFailed.getAsInt());
        }
        for (int rank = 0; own.isEmpty() && rank < byRank.size(); rank++) {
            if (byRank.get(rank) != null) { // the culprit handled its failure; a rank that did not failed the test
                own.add(rank);
            }
        }
        return own;
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
        AssertionFailedError failure = new AssertionFailedError(message.toString(), byRank.get(failing.getFirst()));
        failing.stream().skip(1).forEach(rank -> failure.addSuppressed(byRank.get(rank)));
        for (int rank = 0; rank < byRank.size(); rank++) {
            if (byRank.get(rank) != null && !failing.contains(rank)) {
                failure.addSuppressed(byRank.get(rank));
            }
        }
        closeErrors.forEach(failure::addSuppressed);
        return failure;
    }
}
