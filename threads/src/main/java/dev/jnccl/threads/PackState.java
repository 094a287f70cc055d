package dev.jnccl.threads;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.Diagnosis;
import dev.jnccl.GrowTicket;
import dev.jnccl.JncclException;
import dev.jnccl.RankSummary;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.internal.Backoff;
import dev.jnccl.internal.Deadlines;
import dev.jnccl.spi.Diagnoses;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReference;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What the ranks of one pack share: a barrier that breaks when any rank fails, slots for host
 * gathers and for the per-transaction exchange of threads mode, the launch-queue throttle's
 * counters, the first failure and its diagnosis (the channel of threads mode's diagnoses: every
 * rank's summary is read from its communicator, see {@link #summaries}).
 *
 * <p>A failing pack and the memcpy transports: a rank's comms stream copies from its peers'
 * buffers (pulls), so a peer that is released by the failure and frees its buffers at once could be
 * read after the free. Therefore every rank enqueues such copies only through {@link #enqueueReads}
 * (which refuses once the pack has failed, and records the rank's {@code readsDone} event after
 * them), and every exception that releases a rank because of the pack's failure first waits,
 * bounded by the close timeout, until every rank's {@code readsDone} has completed
 * ({@link #awaitReadsDrained}); so does each rank's close, hence {@link ThreadsPack#join()}.
 *
 * <p>With {@link ThreadsOptions#withContinueWithoutFailedRanks} a failing rank is <i>lost</i>
 * ({@link #lose}) instead of failing the pack: it is left out of the barriers from then on (so the
 * survivors' end of work meets without it), every communicator of the pack is aborted with the loss
 * (their host sides answer {@link #lostRanks}, so calls on them throw {@code RankLostException}),
 * and the packs split or shrunk from this one lose the rank too. The survivors carry on in the
 * packs of their shrunk communicators.
 */
final class PackState {
    private static final Logger LOG = LoggerFactory.getLogger(PackState.class);

    /**
     * The first failure of the pack.
     *
     * @param rank  the failed rank in this pack, or -1 when the failure came from the parent pack
     * @param error what it threw
     * @param who       how reasons name the failed rank ("rank 2", "rank 5 of the parent pack")
     * @param diagnosis the diagnosis of the failure (see {@link #diagnosed}), or null
     */
    record Failure(int rank, Throwable error, String who, Diagnosis diagnosis) {}

    /** The host-side call of a rank whose work has returned (see {@link #finish}). */
    static final String FINISH = "finish";

    private final int size;
    private final Duration drainTimeout;
    /** The fewest ranks this pack goes on with after losing some; 0: a failing rank fails the pack. */
    private final int minWorld;
    /** Per rank: why it was lost, or null while it is not (guarded by lock). */
    private final Throwable[] lost;
    /** How many ranks are lost (written under lock; volatile for the waits' checks). */
    private volatile int lostCount;
    /** The pack this one was split from (see {@link #child}), or null. */
    private final PackState parent;
    /** Per rank of this pack: its rank in {@link #parent}; null without a parent. */
    private final int[] parentRanks;
    /** Whether this is the pack of a split (else of a shrink's survivors, or the root). */
    private final boolean split;
    /** The packs of the communicators split from this pack's, by split number and color (guarded by lock). */
    private final Map<String, PackState> children = new HashMap<>();
    /** The packs of the survivors of this pack's shrinks, by shrink number and members (guarded by lock). */
    private final Map<String, PackState> shrunk = new HashMap<>();
    /** Per rank: held while the rank enqueues copies from peers' buffers (see {@link #enqueueReads}). */
    private final Object[] readLocks;
    /** Per rank: recorded after its latest copies from peers' buffers; null without memcpy transports. */
    private final CudaEvent[] readsDone;
    private final Object lock = new Object();
    /** The launch's spare devices and replacement ranks (see {@link Replacements}); null without spares. */
    private volatile Replacements replacements;
    private final AtomicReference<Failure> failure = new AtomicReference<>();
    /**
     * The diagnosis of the pack's failure: made by the rank whose watchdog fired or whose host-side
     * wait passed its deadline, before its abort fails the pack; the first one stands.
     */
    private final AtomicReference<Diagnosis> diagnosis = new AtomicReference<>();
    private final Communicator[] communicators;
    private final Object[] slots;
    /**
     * Per rank: the transaction it started last (Long.MAX_VALUE once it starts no more). Written
     * without the lock by the throttle's fast path, so a volatile array.
     */
    private final AtomicLongArray started;
    /** How many ranks wait in the throttle (written under lock): only then does a start wake anyone. */
    private volatile int throttled;
    /**
     * Per rank: the transactions it had when its work returned or its communicator closed, -1 while
     * it works (guarded by lock). A peer that executed more waits for collectives it will never join.
     */
    private final long[] closedAfter;
    /** Per rank: whether {@link #closedAfter} was recorded when its work returned (not by its close). */
    private final boolean[] workReturned;
    /** Per rank: its thread while it runs the user's work (guarded by lock); interrupted when the pack fails. */
    private final Thread[] working;
    /** Per rank: whether it is in the current barrier generation (guarded by lock). */
    private final boolean[] present;
    private final String[] affinity;
    private final List<AutoCloseable> retired = new ArrayList<>();
    private int left;
    private int arrived;
    private long generation;
    private String generationOperation;
    private int generationRank;

    /**
     * @param drainTimeout how long a rank released by a failure waits for its peers' copies from its
     *                     buffers (the communicators' close timeout)
     */
    PackState(int size, Duration drainTimeout) {
        this(size, drainTimeout, 0, null, null, false);
    }

    /**
     * @param minWorld the fewest ranks the pack goes on with after losing some (see {@link #lose}); 0
     *                 for off
     */
    PackState(int size, Duration drainTimeout, int minWorld) {
        this(size, drainTimeout, minWorld, null, null, false);
    }

    private PackState(int size, Duration drainTimeout, int minWorld, PackState parent, int[] parentRanks,
                      boolean split) {
        this.split = split;
        this.replacements = parent == null ? null : parent.replacements;
        this.size = size;
        this.drainTimeout = drainTimeout;
        this.minWorld = minWorld;
        this.lost = new Throwable[size];
        this.parent = parent;
        this.parentRanks = parentRanks;
        this.readLocks = new Object[size];
        Arrays.setAll(readLocks, i -> new Object());
        this.readsDone = new CudaEvent[size];
        this.communicators = new Communicator[size];
        this.slots = new Object[size];
        this.started = new AtomicLongArray(size);
        this.closedAfter = new long[size];
        Arrays.fill(closedAfter, -1);
        this.workReturned = new boolean[size];
        this.present = new boolean[size];
        this.working = new Thread[size];
        this.affinity = new String[size];
    }

    void reportAffinity(int rank, String report) {
        synchronized (lock) {
            affinity[rank] = report;
        }
    }

    /** What each rank's thread did about CPU affinity (null where pinning was off). */
    List<String> affinityReports() {
        synchronized (lock) {
            return Arrays.asList(affinity.clone());
        }
    }

    int size() {
        return size;
    }

    /** Whether this is the pack of a split (see {@link #child}). */
    boolean isChild() {
        return parent != null;
    }

    /**
     * The shared state of the ranks that got the same color in split number {@code split} of this
     * pack's communicators (the first member to ask creates it). A failure in either pack fails the
     * other, so a failing child releases the whole pack and vice versa.
     *
     * @param members the child's ranks in this pack, in child rank order
     */
    PackState child(long split, int color, List<Integer> members) {
        PackState child;
        synchronized (lock) {
            // A child goes on down to one rank: whether the job can go on is the root pack's minimum.
            child = children.computeIfAbsent(split + "/" + color, key -> new PackState(members.size(), drainTimeout,
                    Math.min(minWorld, 1), this, members.stream().mapToInt(Integer::intValue).toArray(), true));
        }
        Failure failed = failure.get();
        if (failed != null) {
            child.failFromParent(failed);
        }
        return child;
    }

    /**
     * The shared state of the survivors of shrink number {@code shrink} of this pack's communicators
     * (the first survivor to ask creates it): its ranks are {@code members} only, so it never waits
     * for an excluded rank. A failure among the survivors fails this pack too (see {@link #failed}), and
     * this pack's failure fails theirs (with a minimum world, a loss is no failure: see {@link #lose};
     * a later loss of a survivor reaches their pack as a loss too).
     *
     * @param members the survivors' ranks in this pack, in their new rank order
     */
    PackState survivors(long shrink, List<Integer> members) {
        PackState survivors;
        synchronized (lock) {
            survivors = shrunk.computeIfAbsent(shrink + "/" + members, key -> new PackState(members.size(),
                    drainTimeout, Math.min(minWorld, 1), this, members.stream().mapToInt(Integer::intValue).toArray(),
                    false));
        }
        Failure failed = failure.get();
        if (failed != null) {
            survivors.failFromParent(failed);
        }
        return survivors;
    }

    /**
     * The shared state of the grown world of {@code ticket} (the first rank, existing or new, to ask
     * creates it): this pack's ranks keep their ranks, the new ranks {@code [ticket.fromWorld(),
     * ticket.toWorld())} are the replacements the launch starts. Related to this pack as a shrink's
     * survivors are (see {@link #survivors}); a later loss of one of this pack's ranks reaches it too.
     */
    PackState grown(GrowTicket ticket) {
        PackState grown;
        synchronized (lock) {
            int[] ranks = new int[ticket.toWorld()];
            Arrays.setAll(ranks, r -> r < size ? r : -1); // a new rank has no rank here
            grown = shrunk.computeIfAbsent("grow " + ticket, key -> new PackState(ticket.toWorld(), drainTimeout,
                    Math.min(minWorld, 1), this, ranks, false));
        }
        Failure failed = failure.get();
        if (failed != null) {
            grown.failFromParent(failed);
        }
        return grown;
    }

    /** The launch's replacements (set on the root pack before any rank starts; inherited by every pack made from it). */
    void replacements(Replacements spares) {
        this.replacements = spares;
    }

    /** {@return the launch's replacements, or null when it has no spare devices} */
    Replacements replacements() {
        return replacements;
    }

    /** The packs split or shrunk from this one. Holds the lock. */
    private List<PackState> descendants() {
        List<PackState> all = new ArrayList<>(children.values());
        all.addAll(shrunk.values());
        return all;
    }

    private void failFromParent(Failure failed) {
        failed(new Failure(-1, failed.error(), failed.who(), failed.diagnosis()));
    }
    void register(int rank, Communicator communicator) {
        synchronized (lock) {
            communicators[rank] = communicator;
        }
        Failure failed = failure.get();
        if (failed != null) {
            communicator.abort(reason(failed));
        }
    }

    Failure failure() {
        return failure.get();
    }

    /** Why the pack is failing, or null: polled by communicator init so nobody waits for a dead rank. */
    String cancellation() {
        Failure failed = failure.get();
        return failed == null ? null : reason(failed);
    }

    /**
     * "rank 2 failed: ..."; a failure that is no rank's (the pack closed or its join interrupted) is its
     * message; the verdict of a diagnosed failure first.
     */
    static String reason(Failure failed) {
        if (failed.who() == null) {
            return Diagnoses.lead(failed.diagnosis(), String.valueOf(failed.error().getMessage()));
        }
        return Diagnoses.lead(failed.diagnosis(), failed.who() + " failed: " + failed.error());
    }

    /**
     * Records {@code error} of {@code rank}; the first failure releases every waiting rank and
     * aborts every communicator of the pack. Returns whether this was the first failure.
     */
    boolean fail(int rank, Throwable error) {
        // In a split's pack, reasons name the rank as the whole pack knows it too.
        return failed(new Failure(rank, error, who(rank), diagnosis.get()));
    }

    private boolean failed(Failure failed) {
        if (!failure.compareAndSet(null, failed)) {
            return false;
        }
        int rank = failed.rank();
        Communicator[] toAbort;
        List<PackState> splits;
        synchronized (lock) {
            lock.notifyAll();
            toAbort = communicators.clone();
            splits = descendants();
        }

        // The packs related by splits fail too (each only once: the first failure wins in each).
        if (failsParent(rank)) {
            parent.diagnosed(failed.diagnosis());
            parent.failed(new Failure(parentRanks[rank], failed.error(), failed.who(), failed.diagnosis()));
        }
        for (PackState child : splits) {
            child.failFromParent(failed);
        }
        // The failing rank's own communicator last: its abort may wait for the peers' copies (see
        // awaitReadsDrained), which the peers' aborts let finish when a collective is stuck.
        try {
            for (int r = 0; r < toAbort.length; r++) {
                if (r != rank) {
                    abortQuietly(toAbort[r], failed);
                }
            }
            if (rank >= 0 && rank < toAbort.length) {
                abortQuietly(toAbort[rank], failed);
            }
        } finally {
            // User code of the other ranks may wait for this rank outside jnccl (a queue, a latch, a
            // sleep): the interrupt ends such waits, as executors cancel tasks. After the aborts, so
            // that a rank interrupted inside a jnccl wait finds its communicator aborted and says why;
            // and whatever the aborts did, or every rank waiting outside jnccl would wait on.
            // Under the lock, and only threads still in their work: a rank that has left it (working(r,
            // false) takes the lock too) is closing, and an interrupt there would cut its waits short.
            synchronized (lock) {
                for (Thread thread : working) {
                    if (thread != null && thread != Thread.currentThread()) {
                        thread.interrupt();
                    }
                }
            }
        }
        return true;
    }

    /**
     * Whether this pack's failure of {@code rank} fails its parent too: not a split's that follows the
     * parent's loss (the parent's abort reached the split), nor one the parent's own failure caused.
     */
    private boolean failsParent(int rank) {
        return parent != null && rank >= 0 && !(split && parent.abortedForLoss());
    }

    /**
     * Rank {@code rank} has failed for good ({@code error}: its work threw, or its thread was
     * interrupted). With the pack's minimum world off this is {@link #fail}. Otherwise the rank is
     * lost: it leaves the barriers (a survivors' end of work no longer waits for it), the ranks
     * waiting in other host-side calls are released, the packs split from this one lose it too, and
     * every communicator of the pack is aborted with the loss (its host side answers
     * {@link #lostRanks} from then on). A loss that leaves fewer than the minimum world fails the
     * pack, naming every lost rank. Returns whether this call lost the rank or failed the pack.
     */
    boolean lose(int rank, Throwable error) {
        if (minWorld == 0) {
            return fail(rank, error);
        }
        Communicator[] toAbort;
        List<PackState> splits;
        synchronized (lock) {
            if (failure.get() != null || lost[rank] != null) {
                return false;
            }
            if (size - lostCount - 1 < minWorld) {
                toAbort = null; // not marked lost: waiting ranks must be released by the failure, not by a loss
                splits = List.of();
            } else {
                lost[rank] = error;
                lostCount++;
                leaveBarrier(rank);
                toAbort = communicators.clone();
                splits = descendants();
            }
        }
        if (toAbort == null) {
            return fail(rank, belowMinimum(rank, error));
        }
        String reason = who(rank) + " was lost: " + error + "; the survivors go on without " + lostRanks()
                + " (RankLostException.recover)";
        LOG.warn("{}", reason, error);
        for (PackState child : splits) {
            child.loseParentRank(rank, error);
        }
        for (Communicator communicator : toAbort) {
            abortQuietly(communicator, reason);
        }
        return true;
    }

    /**
     * A hang that rank {@code reporter}'s watchdog diagnosed: with a minimum world, the ranks the
     * verdict names as never having reached the call the others wait in (and only those: not a
     * mismatch, a rank that left, or one that gave no summary) are lost, and their threads
     * interrupted, so that user code waiting in an interruptible wait ends. Returns whether the pack
     * now goes on without lost ranks (the reporter's abort is then the loss's, not a failure).
     */
    boolean loseHung(int reporter, Diagnosis diagnosis) {
        if (minWorld == 0 || diagnosis == null) {
            return false;
        }
        List<Integer> named = neverReached(diagnosis.verdict());
        if (named.isEmpty() || named.contains(reporter) || named.stream().anyMatch(r -> r >= size)) {
            return false;
        }
        List<Integer> culprits = named.stream().filter(r -> !waitsInJnccl(r)).toList();
        if (culprits.isEmpty()) {
            return false;
        }
        for (int culprit : culprits) {
            Thread thread;
            synchronized (lock) {
                thread = working[culprit];
            }
            lose(culprit, new JncclException(who(culprit) + " hung and was interrupted: " + diagnosis.verdict()));
            if (thread != null) {
                thread.interrupt(); // after the loss: whatever its next jnccl call, its communicator is aborted
            }
        }
        return abortedForLoss();
    }

    /**
     * Whether rank {@code rank}'s thread is inside a jnccl call now: a rank that the verdict names as
     * never having reached this pack's call, but which waits in a call on another communicator (a
     * split's collective that waits for the hung rank), is not hung itself; that communicator's own
     * abort answers for it.
     */
    private boolean waitsInJnccl(int rank) {
        Thread thread;
        synchronized (lock) {
            thread = working[rank];
        }
        if (thread == null) {
            return false;
        }
        for (StackTraceElement frame : thread.getStackTrace()) {
            String type = frame.getClassName();
            if (!(type.startsWith("java.") || type.startsWith("jdk.") || type.startsWith("sun."))) {
                return JNCCL_CALL.matcher(type).matches(); // the innermost frame outside the JDK
            }
        }
        return false;
    }

    /**
     * The classes a thread inside a jnccl call waits in: core's, the CUDA, bindings and internal
     * packages', and the threads package's host side (its other classes run the user's work).
     */
    private static final Pattern JNCCL_CALL = Pattern.compile("dev\\.jnccl\\.((cuda|bindings|internal)\\.)?[A-Z][^.]*"
            + "|dev\\.jnccl\\.threads\\.(PackState|ThreadsHost|CopyEngineTransport)(\\$.*)?");

    /** The ranks of clauses "rank N never reached ..." when every clause of the verdict is one; else none. */
    static List<Integer> neverReached(String verdict) {
        List<Integer> ranks = new ArrayList<>();
        for (String clause : verdict.split("; ")) {
            Matcher m = NEVER_REACHED.matcher(clause);
            if (!m.lookingAt()) {
                return List.of();
            }
            ranks.add(Integer.parseInt(m.group(1)));
        }
        return ranks;
    }

    /** The verdict's clause for a rank that lags (see {@link Diagnosis}). */
    private static final Pattern NEVER_REACHED = Pattern.compile(
            "rank (\\d+) never reached ");

    /** A lost rank is no longer waited for: its place in the barrier goes, the others' waits end. Holds the lock. */
    private void leaveBarrier(int rank) {
        started.set(rank, Long.MAX_VALUE);
        if (present[rank]) {
            present[rank] = false;
            arrived--;
        }
        if (arrived > 0 && !FINISH.equals(generationOperation)) {
            // Ranks in a host-side call of the aborted communicators: released by the loss (see awaitOthers).
            arrived = 0;
            Arrays.fill(present, false);
            generation++;
        } else if (arrived > 0 && arrived == size - lostCount) {
            completeGeneration();
        }
        lock.notifyAll();
    }

    /** Every rank still in the pack has arrived: the barrier opens. Holds the lock. */
    private void completeGeneration() {
        arrived = 0;
        Arrays.fill(present, false);
        generation++;
        lock.notifyAll();
    }

    /** Parent rank {@code parentRank} is lost: so is its rank in this (split or shrunk) pack, if a member. */
    private void loseParentRank(int parentRank, Throwable error) {
        for (int r = 0; r < size; r++) {
            if (parentRanks[r] == parentRank) {
                lose(r, error);
            }
        }
    }

    /** The pack's failure when a loss leaves too few ranks: names every lost rank, earlier ones' errors suppressed. */
    private JncclException belowMinimum(int rank, Throwable error) {
        List<Integer> gone = new ArrayList<>(lostRanks());
        gone.add(rank);
        gone.sort(null);
        JncclException failed = new JncclException(who(rank) + " failed (" + error + ") and ranks " + gone
                + " are lost: " + (size - gone.size()) + " of " + size + " ranks remain, fewer than"
                + " ThreadsOptions.minWorld " + minWorld, error);
        synchronized (lock) {
            for (int r = 0; r < size; r++) {
                if (r != rank && lost[r] != null) {
                    failed.addSuppressed(lost[r]);
                }
            }
        }
        return failed;
    }

    /** {@return the ranks lost so far, sorted, in this pack's numbering} */
    List<Integer> lostRanks() {
        List<Integer> gone = new ArrayList<>();
        synchronized (lock) {
            for (int r = 0; r < size; r++) {
                if (lost[r] != null) {
                    gone.add(r);
                }
            }
        }
        return gone;
    }

    /** {@return each lost rank with what it threw, in rank order} */
    SortedMap<Integer, Throwable> lostErrors() {
        SortedMap<Integer, Throwable> errors = new TreeMap<>();
        synchronized (lock) {
            for (int r = 0; r < size; r++) {
                if (lost[r] != null) {
                    errors.put(r, lost[r]);
                }
            }
        }
        return errors;
    }

    /**
     * Whether the pack's communicators are aborted because ranks were lost (and the pack has not
     * failed): their aborts and the exceptions that follow must not fail the pack.
     */
    boolean abortedForLoss() {
        return lostCount > 0 && failure.get() == null;
    }

    /**
     * Aborts {@code communicator} (null: none) for the pack's failure. An abort that throws is
     * logged and the next one goes on: each rank's communicator is aborted and each rank released
     * whatever one abort did, and the failure the ranks report stays the pack's first.
     */
    private static void abortQuietly(Communicator communicator, Failure failed) {
        abortQuietly(communicator, reason(failed));
    }

    /** Aborts {@code communicator} (null: none) for {@code reason}, logging an abort that throws. */
    private static void abortQuietly(Communicator communicator, String reason) {
        if (communicator == null) {
            return;
        }
        try {
            communicator.abort(reason);
        } catch (RuntimeException e) {
            LOG.warn("rank {}: aborting its communicator for the pack's failure failed; the pack goes on releasing"
                    + " its ranks", communicator.rank(), e);
        }
    }

    /**
     * Marks {@code rank}'s thread as running the user's work ({@code running}) or done with it: while
     * it runs, the pack's failure interrupts it. Returns whether it was interrupted by the pack
     * meanwhile (when {@code running} is false).
     */
    boolean working(int rank, boolean running) {
        synchronized (lock) {
            working[rank] = running ? Thread.currentThread() : null;
        }
        return !running && failure.get() != null;
    }

    /** Registers the event {@code rank} records after its copies from peers' buffers (memcpy transports). */
    void trackReads(int rank, CudaEvent done) {
        synchronized (readLocks[rank]) {
            readsDone[rank] = done;
        }
    }

    /**
     * Runs {@code reads} (enqueue copies from peers' buffers, then record the rank's
     * {@code readsDone}) unless the pack has failed; then it waits for the enqueued reads and throws
     * {@link CommunicatorAbortedException}. The check and the enqueue are atomic against
     * {@link #awaitReadsDrained}: a drain that starts after the failure either sees these copies in
     * {@code readsDone} or they are never enqueued.
     */
    void enqueueReads(String operation, int rank, Runnable reads) {
        boolean failed;
        synchronized (readLocks[rank]) {
            failed = failure.get() != null;
            if (!failed) {
                reads.run();
            }
        }
        if (failed) {
            CommunicatorAbortedException released = released(operation, rank);
            awaitReadsDrained(rank);
            throw released;
        }
    }

    /**
     * After a failure of the pack: blocks, at most the drain timeout, until no comms stream of the
     * pack still copies from or into buffers that {@code rank}'s user code may free once the
     * caller's exception reaches it: every rank's {@code readsDone} (this rank's own included: its
     * copies read its own shard and write its targets) has completed. Returns whether they did. Does
     * nothing while the pack has not failed.
     *
     * <p>The caller may hold its communicator's lock, so a stream stuck behind a collective that only
     * this rank's abort would end makes this wait the full timeout; a pack reaches that only with a
     * collective that hangs by itself (the watchdog's case) and copies enqueued after it.
     */
    boolean awaitReadsDrained(int rank) {
        if (failure.get() == null) {
            return true;
        }
        long deadline = Deadlines.deadline(drainTimeout);
        for (int reader = 0; reader < size; reader++) {
            CudaEvent done;
            // Taking the reader's lock once waits out a batch of copies being enqueued right now;
            // batches after this see the failure and are never enqueued.
            synchronized (readLocks[reader]) {
                done = readsDone[reader];
            }
            if (done != null && !awaitComplete(done, deadline)) {
                LOG.warn("rank {}: released by the pack's failure although rank {}'s comms stream may still copy"
                        + " from its buffers after {} ms (the close timeout)", rank, reader,
                        Deadlines.toMillis(drainTimeout));
                return false;
            }
        }
        return true;
    }

    /**
     * Waits for {@code event} until {@code deadline}, interrupt or not: the wait protects buffers
     * that user code frees next, and it is bounded. An interrupt that arrives meanwhile is kept.
     */
    private static boolean awaitComplete(CudaEvent event, long deadline) {
        long spins = 0;
        while (true) {
            try {
                if (event.isComplete()) {
                    return true;
                }
            } catch (RuntimeException e) {
                // An event in error (its stream failed) will not copy any more.
                return true;
            }
            if (Deadlines.passed(deadline)) {
                return false;
            }
            Backoff.pause(spins++); // parks even on an interrupted thread, which keeps its status
        }
    }

    private CommunicatorAbortedException released(String operation, int rank) {
        Failure failed = failure.get();
        return new CommunicatorAbortedException(Diagnoses.lead(failed.diagnosis(), operation + " on rank " + rank
                + " released: " + reason(failed)), failed.error(), failed.diagnosis());
    }

    /**
     * Blocks until all ranks arrive; throws when a rank of the pack has failed. Every arrival names
     * its operation: ranks that meet in different host-side calls (one in a transaction, another
     * done with its work or in a barrier) would otherwise pair up wrongly and hang, so that fails
     * the pack with a message naming both ranks. Waiting longer than {@code timeoutNanos}
     * ({@link Long#MAX_VALUE}: no limit) or being interrupted fails the pack too, naming the ranks
     * that did not arrive; the interrupt status stays set.
     */
    void barrier(String operation, int rank, long timeoutNanos) {
        settle(rank, awaitOthers(operation, rank, timeoutNanos));
    }

    /**
     * Ends one of this rank's waits for the others that did not succeed ({@code failure}: null when
     * it did): the rank's own failure (mismatch, deadline, interrupt) fails the pack first (a release
     * by the pack's failure finds it failed already), and either reaches the caller only after the
     * peers' copies from the rank's buffers have drained.
     */
    private void settle(int rank, RuntimeException failure) {
        if (failure == null) {
            return;
        }
        if (failure instanceof PastDeadline past) {
            failure = diagnosedDeadline(rank, past.getMessage());
        }
        // fail() aborts communicators, which take their owners' locks: never call it holding ours.
        if (failure.getCause() instanceof InterruptedException) {
            lose(rank, failure); // this rank's thread was interrupted: lost, where the pack goes on without it
        } else if (!abortedForLoss()) {
            fail(rank, failure); // after a loss every communicator of the pack is aborted: this rank's failure is moot
        }
        awaitReadsDrained(rank);
        throw failure;
    }

    /**
     * What a wait of this pack's returns when it passed its deadline, before the rank's failure is
     * made of it (see {@link #diagnosedDeadline}): the message only, no stack.
     */
    private static final class PastDeadline extends RuntimeException {
        private static final long serialVersionUID = 1L;

        PastDeadline(String message) {
            super(message, null, false, false);
        }
    }

    /**
     * Rank {@code rank}'s wait passed its deadline: a hang, which its communicator diagnoses before it
     * is aborted, as its watchdog would (the summaries come from this pack, see {@link #summaries}).
     * Returns the failure, its message led by the verdict. Holds no lock of the pack.
     */
    private CommunicatorAbortedException diagnosedDeadline(int rank, String message) {
        Communicator own;
        synchronized (lock) {
            own = communicators[rank];
        }
        Diagnosis made = null;
        if (own != null) {
            try {
                made = Diagnoses.diagnose(own, message);
            } catch (RuntimeException e) {
                LOG.warn("rank {}: the diagnosis of a host-side deadline failed", rank, e);
            }
        }
        return new CommunicatorAbortedException(Diagnoses.lead(made, message), null, made);
    }

    /**
     * Every rank's summary, in rank order, read from its communicator: snapshots, no rank is waited
     * for. A rank whose work returned is closing, one with no communicator gave none.
     */
    List<RankSummary> summaries() {
        Communicator[] all;
        long[] after;
        boolean[] returned;
        synchronized (lock) {
            all = communicators.clone();
            after = closedAfter.clone();
            returned = workReturned.clone();
        }
        List<RankSummary> summaries = new ArrayList<>(size);
        for (int r = 0; r < size; r++) {
            if (all[r] == null) {
                summaries.add(Diagnoses.absent(r, size, "it has no communicator (its init has not finished, or failed)"));
                continue;
            }
            RankSummary summary;
            try {
                summary = Diagnoses.summary(all[r]);
            } catch (RuntimeException e) {
                summaries.add(Diagnoses.absent(r, size, "its summary failed: " + e));
                continue;
            }
            summaries.add(after[r] < 0 ? summary : Diagnoses.leaving(summary, returned[r] ? "its work returned" : ""));
        }
        return summaries;
    }

    /** {@return the diagnosis of the pack's failure, or null} */
    Diagnosis diagnosis() {
        Failure failed = failure.get();
        return failed != null && failed.diagnosis() != null ? failed.diagnosis() : diagnosis.get();
    }

    /** Keeps {@code made} (null: nothing) unless a diagnosis came first; {@return the diagnosis that stands} */
    Diagnosis diagnosed(Diagnosis made) {
        if (made != null) {
            diagnosis.compareAndSet(null, made);
        }
        return diagnosis();
    }

    /**
     * The barrier itself; returns this rank's own failure (mismatch, deadline, interrupt) instead of
     * failing the pack, or its release when the pack has failed.
     */
    private RuntimeException awaitOthers(String operation, int rank, long timeoutNanos) {
        long start = System.nanoTime();
        synchronized (lock) {
            RuntimeException early = releasedNow(operation, rank);
            if (early != null) {
                return early;
            }
            // Checked and counted under one lock hold, so two ranks cannot both see an empty barrier.
            if (arrived == 0) {
                generationOperation = operation;
                generationRank = rank;
            } else if (!generationOperation.equals(operation)) {
                return mismatch(operation, rank);
            }
            long mine = generation;
            present[rank] = true;
            if (++arrived == size - lostCount) {
                completeGeneration();
                return null;
            }
            while (generation == mine) {
                RuntimeException released = releasedNow(operation, rank);
                if (released != null) {
                    return released;
                }
                long waited = System.nanoTime() - start;
                if (waited >= timeoutNanos) {
                    return new PastDeadline(operation + " on " + who(rank) + ": " + absent()
                            + " did not arrive within " + TimeUnit.NANOSECONDS.toMillis(timeoutNanos) + " ms");
                }
                try {
                    if (timeoutNanos == Long.MAX_VALUE) {
                        lock.wait();
                    } else {
                        TimeUnit.NANOSECONDS.timedWait(lock, timeoutNanos - waited);
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    if (failure.get() != null) {
                        return released(operation, rank); // the pack's own interrupt of its ranks
                    }
                    return new CommunicatorAbortedException(operation + " on " + who(rank) + " was interrupted while "
                            + absent() + " had not arrived", e);
                }
            }
            return releasedByLoss(operation) ? lossRelease(operation, rank) : null;
        }
    }

    /** What ends a wait in {@code operation} now: the pack's failure or a loss; null when neither. */
    private RuntimeException releasedNow(String operation, int rank) {
        if (failure.get() != null) {
            return released(operation, rank);
        }
        return releasedByLoss(operation) ? lossRelease(operation, rank) : null;
    }

    /**
     * Whether a wait in {@code operation} ends because ranks were lost: every host-side call of the
     * pack's (aborted) communicators does; the end of the survivors' work meets without the lost.
     */
    private boolean releasedByLoss(String operation) {
        return lostCount > 0 && !operation.equals(FINISH);
    }

    /** What a rank released by a loss throws (see {@link #settle}: it does not fail the pack). */
    private CommunicatorAbortedException lossRelease(String operation, int rank) {
        return new CommunicatorAbortedException(operation + " on " + who(rank) + " released: ranks " + lostRanks()
                + " were lost", lostErrors().values().stream().findFirst().orElse(null));
    }

    /**
     * Rank {@code rank} arrives in {@code operation} while the current generation's ranks are in
     * another. One whose work has returned ({@link #FINISH}) will not arrive: the rank waiting for
     * it is released as from a failed rank. Holds the lock.
     */
    private RuntimeException mismatch(String operation, int rank) {
        String order = ": in threads mode every rank must make the same host-side calls (barrier, host gathers,"
                + " memcpy-mode transactions) in the same order";
        if (operation.equals(FINISH) || generationOperation.equals(FINISH)) {
            boolean returned = operation.equals(FINISH);
            return new CommunicatorAbortedException("rank " + (returned ? rank : generationRank) + " returned from its"
                    + " work while rank " + (returned ? generationRank : rank) + " is in "
                    + (returned ? generationOperation : operation) + " and waits for it" + order);
        }
        return new IllegalStateException("rank " + rank + " is in " + operation + " while rank " + generationRank
                + " is in " + generationOperation + order);
    }

    /** The ranks not yet in the current barrier, as "ranks [1, 3]" (in this pack's numbering). Holds the lock. */
    private String absent() {
        List<Integer> missing = new ArrayList<>();
        for (int r = 0; r < size; r++) {
            if (!present[r]) {
                missing.add(r);
            }
        }
        return (missing.size() == 1 ? "rank " + missing.getFirst() : "ranks " + missing)
                + (parent == null ? "" : " of the split");
    }

    /** How reasons name {@code rank}: as the whole pack knows it too. */
    private String who(int rank) {
        if (rank < 0) {
            return null; // the pack's owner (ThreadsPack.close, an interrupted join), not a rank
        }
        if (parent != null && parentRanks[rank] < 0) {
            return "replacement rank " + rank;
        }
        return parent == null ? "rank " + rank : "rank " + parentRanks[rank] + " (rank " + rank + " of a split)";
    }

    /** Every rank's {@code value}, in rank order (two barriers: publish, then free the slots). */
    @SuppressWarnings("unchecked")
    <T> List<T> exchange(String operation, int rank, T value, long timeoutNanos) {
        synchronized (lock) {
            slots[rank] = value;
        }
        barrier(operation, rank, timeoutNanos);
        List<T> all;
        synchronized (lock) {
            all = new ArrayList<>((List<T>) Arrays.asList(slots));
        }
        barrier(operation, rank, timeoutNanos);
        return all;
    }

    /**
     * Launch-queue throttle: rank {@code rank} starts its transaction number {@code sequence} only
     * when no rank is more than {@code maxLead} transactions behind. Waiting longer than
     * {@code timeoutNanos} or being interrupted fails the pack: this rank's transaction does not
     * run, so the others' would wait for it forever.
     */
    void throttle(int rank, long sequence, int maxLead, long timeoutNanos) {
        settle(rank, awaitLead(rank, sequence, maxLead, timeoutNanos));
    }

    /**
     * The throttle's fast path takes no lock: a transaction within the lead (nearly every one) only
     * publishes its number and, when a rank waits in the throttle, wakes it. A rank that must wait
     * counts itself in {@link #throttled} before it reads the others' numbers, and a start writes its
     * number before it reads that count (both volatile), so no wake-up is lost; the wait is bounded
     * (100 ms) all the same.
     */
    private RuntimeException awaitLead(int rank, long sequence, int maxLead, long timeoutNanos) {
        started.set(rank, sequence);
        if (throttled > 0) {
            synchronized (lock) {
                lock.notifyAll();
            }
        }
        if (failure.get() == null && sequence - slowestStart() <= maxLead) {
            return null;
        }
        synchronized (lock) {
            throttled++;
            try {
                return awaitLeadLocked(rank, sequence, maxLead, timeoutNanos);
            } finally {
                throttled--;
            }
        }
    }

    /** {@return the lowest transaction number any rank started} */
    private long slowestStart() {
        long slowest = Long.MAX_VALUE;
        for (int r = 0; r < size; r++) {
            slowest = Math.min(slowest, started.get(r));
        }
        return slowest;
    }

    /** The throttle's wait, holding the lock, until no rank is more than {@code maxLead} behind. */
    private RuntimeException awaitLeadLocked(int rank, long sequence, int maxLead, long timeoutNanos) {
        long start = System.nanoTime();
        while (true) {
            if (failure.get() != null) {
                return released("transaction throttle", rank);
            }
            if (releasedByLoss("transaction throttle")) {
                return lossRelease("transaction throttle", rank);
            }
            long slowest = Long.MAX_VALUE;
            int behind = -1;
            for (int r = 0; r < size; r++) {
                if (started.get(r) < slowest) {
                    slowest = started.get(r);
                    behind = r;
                }
            }
            if (sequence - slowest <= maxLead) {
                return null;
            }
            long waited = System.nanoTime() - start;
            if (waited >= timeoutNanos) {
                return new PastDeadline("transaction #" + sequence + " of " + who(rank)
                        + " waited " + TimeUnit.NANOSECONDS.toMillis(waited) + " ms for rank " + behind
                        + " (at transaction #" + slowest + ") to come within ThreadsOptions.maxLead " + maxLead);
            }
            try {
                TimeUnit.NANOSECONDS.timedWait(lock, Math.min(timeoutNanos - waited, TimeUnit.MILLISECONDS.toNanos(100)));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                if (failure.get() != null) {
                    return released("transaction throttle", rank); // the pack's own interrupt of its ranks
                }
                return new CommunicatorAbortedException("transaction #" + sequence + " of " + who(rank)
                        + " was interrupted while it waited for rank " + behind + " (ThreadsOptions.maxLead)", e);
            }
        }
    }

    /**
     * Keeps resources that peers may still use (the memcpy transports' events, which every rank
     * waits on) until every rank has left the pack.
     */
    void retire(AutoCloseable... resources) {
        synchronized (lock) {
            retired.addAll(List.of(resources));
        }
    }

    /** Called once per rank after its communicator is closed; the last one frees what was retired. */
    void leave() {
        List<AutoCloseable> toClose;
        synchronized (lock) {
            if (++left < size) {
                return;
            }
            toClose = new ArrayList<>(retired);
            retired.clear();
        }
        for (AutoCloseable resource : toClose) {
            try {
                resource.close();
            } catch (Exception e) {
                // Teardown of an event; nothing can use it any more and nothing else depends on it.
            }
        }
    }

    /**
     * Rank {@code rank}'s work has returned: records how many transactions it started (never fewer
     * than it executed) for the peers' watchdogs (see {@link #closedBefore}), stops holding them back
     * in the throttle (it starts no more), and waits for every rank's work to return, without limit
     * (the others' work may take hours: it is {@link ThreadsPack#join()}'s wait). A rank waiting in a
     * host-side call meanwhile is released (see {@link #mismatch}).
     */
    void finish(int rank) {
        synchronized (lock) {
            if (lost[rank] != null) {
                return; // a hung rank that returned after all: the survivors went on without it
            }
            if (closedAfter[rank] < 0) {
                closedAfter[rank] = started.get(rank);
                workReturned[rank] = true;
            }
            started.set(rank, Long.MAX_VALUE);
            lock.notifyAll();
        }
        barrier(FINISH, rank, Long.MAX_VALUE);
    }

    /**
     * Rank {@code rank}'s communicator is closing after {@code executed} transactions: the count the
     * peers' watchdogs compare theirs with (exact, and final: it replaces the one its work's return
     * recorded); it starts no more, so it holds nobody back in the throttle.
     */
    void closing(int rank, long executed) {
        synchronized (lock) {
            closedAfter[rank] = executed;
            workReturned[rank] = false;
            started.set(rank, Long.MAX_VALUE);
            lock.notifyAll();
        }
    }

    /**
     * Why rank {@code rank}, which executed {@code executed} transactions and has waited
     * {@code pendingNanos} for the last ones, waits in vain: a peer whose work returned or whose
     * communicator closed after fewer will never join them. Null when no peer did.
     */
    String closedBefore(int rank, long executed, long pendingNanos) {
        synchronized (lock) {
            for (int peer = 0; peer < size; peer++) {
                long after = closedAfter[peer];
                if (peer != rank && after >= 0 && after < executed) {
                    return who(peer) + " closed its communicator after " + after + " transaction(s) while this rank"
                            + " executed " + executed + " and has waited " + TimeUnit.NANOSECONDS.toMillis(pendingNanos)
                            + " ms for the last ones: they wait for a rank that will not join them"
                            + (workReturned[peer] ? " (its work returned; the launcher closes its communicator)" : "");
                }
            }
        }
        return null;
    }

    /** A rank that is done never holds the others back in the throttle. */
    void finished(int rank) {
        synchronized (lock) {
            started.set(rank, Long.MAX_VALUE);
            lock.notifyAll();
        }
    }
}
