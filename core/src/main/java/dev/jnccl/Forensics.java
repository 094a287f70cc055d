package dev.jnccl;

import dev.jnccl.RankSummary.Activity;
import dev.jnccl.RankSummary.Status;
import dev.jnccl.internal.Deadlines;
import dev.jnccl.spi.Failures;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One communicator's part in a {@link Diagnosis}: what its calling thread is doing (one int and one
 * thread reference, written with release semantics on entry and exit of the calls that may wait,
 * so the hot path stays allocation-free and fence-free), its {@link RankSummary} (a snapshot any
 * thread may take without waiting for the rank), and the diagnosis itself: the summaries exchanged
 * through the launcher's {@link Failures}, the {@link Verdict}, the ERROR log line and the JFR event.
 */
final class Forensics {
    private static final Logger LOG = LoggerFactory.getLogger(Communicator.class);

    // What the calling thread is in: an index into ACTIVITY and CALL.
    static final int USER = 0;
    static final int EXECUTE = 1;
    static final int LAUNCH = 2;
    static final int AWAIT = 3;
    static final int SYNCHRONIZE = 4;
    static final int PACE = 5;
    static final int BARRIER = 6;
    static final int GATHER = 7;
    static final int ALL_GATHER = 8;
    static final int SPLIT = 9;
    static final int CLOSE = 10;
    static final int CHECK = 11;
    private static final Activity[] ACTIVITY = {Activity.USER_CODE, Activity.ENQUEUE, Activity.ENQUEUE, Activity.WAIT,
            Activity.WAIT, Activity.HOST_CALL, Activity.HOST_CALL, Activity.HOST_CALL, Activity.HOST_CALL,
            Activity.HOST_CALL, Activity.CLOSE, Activity.HOST_CALL};
    private static final String[] CALL = {"", "execute", "launch", "await", "synchronize", "the launcher's pace",
            "barrier", "gatherBytesHost", "allGatherBytesHost", "split", "close", "the consistency check"};

    /** Top frames kept per summary. */
    private static final int FRAMES = 8;
    /** Pending transactions kept per summary. */
    private static final int PENDING = 32;
    /** The longest the exchange of summaries may take (a quarter of the watchdog's timeout when that is less). */
    private static final long EXCHANGE_NANOS = TimeUnit.SECONDS.toNanos(5);
    /** The packages of jnccl's modules below {@code dev.jnccl}: frames there are no user code. */
    private static final Set<String> JNCCL = Set.of("cuda", "spi", "internal", "bindings", "threads", "mpi", "spark");
    private static final VarHandle DOING;
    private static final VarHandle CALLER;

    static {
        try {
            MethodHandles.Lookup lookup = MethodHandles.lookup();
            DOING = lookup.findVarHandle(Forensics.class, "doing", int.class);
            CALLER = lookup.findVarHandle(Forensics.class, "caller", Thread.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final Communicator face;
    private final TransactionLog log;
    private final FlightRecorder recorder;
    private final Failures failures;
    private final long exchangeNanos;
    /** Held while a diagnosis is made (see {@link #diagnose}). */
    private final Object diagnosing = new Object();
    /** Writes this rank's diagnosis dumps; null when they are off. */
    private final DumpWriter dumps;
    /** What the last calling thread is in (see {@link #enter}); read by any thread. */
    @SuppressWarnings("unused") // through DOING
    private int doing;
    /** The thread of the last call: the one a summary describes. */
    @SuppressWarnings("unused") // through CALLER
    private Thread caller;

    Forensics(Communicator face, TransactionLog log, FlightRecorder recorder, Failures failures,
              CommunicatorOptions options, boolean split) {
        this.face = face;
        this.dumps = DumpWriter.of(options, split, recorder);
        this.log = log;
        this.recorder = recorder;
        this.failures = failures;
        this.exchangeNanos = options.watchdogEnabled()
                ? Math.min(EXCHANGE_NANOS, Deadlines.toNanos(options.watchdogTimeout()) / 4) : EXCHANGE_NANOS;
        CALLER.setRelease(this, Thread.currentThread());
    }

    /**
     * The calling thread enters call {@code what}; {@return what it was in before, for {@link #exit}}.
     * Release writes only (no fence, no allocation): a summary reads them racily, as a snapshot.
     */
    int enter(int what) {
        int before = (int) DOING.getOpaque(this);
        DOING.setRelease(this, what);
        Thread current = Thread.currentThread();
        if (CALLER.getOpaque(this) != current) {
            CALLER.setRelease(this, current);
        }
        return before;
    }

    /** The calling thread goes on with {@code what} (a later stage of the same call). */
    void now(int what) {
        DOING.setRelease(this, what);
    }

    /** The calling thread leaves the call it entered; {@code before} is what {@link #enter} returned. */
    void exit(int before) {
        DOING.setRelease(this, before);
    }

    /** {@return this rank's summary now: taken from any thread, waiting for nothing the rank may hold} */
    RankSummary summary() {
        Thread thread = (Thread) CALLER.getAcquire(this);
        int what = (int) DOING.getAcquire(this);
        StackTraceElement[] frames = thread == null ? new StackTraceElement[0] : thread.getStackTrace();
        Activity activity = thread == null ? Activity.UNKNOWN : thread.isAlive() ? ACTIVITY[what] : Activity.ENDED;
        Status status;
        String detail = "";
        if (face.isClosed()) {
            status = Status.CLOSED;
        } else if (face.isAborted()) {
            status = Status.ABORTED;
            detail = String.valueOf(face.abortReason());
        } else {
            status = what == CLOSE ? Status.CLOSING : Status.OPEN;
        }
        int first = thread == Thread.currentThread() ? ownFrames(frames) : 0;
        return new RankSummary(face.rank(), face.worldSize(), status, detail, log.executed(), recorder.completed(),
                recorder.pending(PENDING), activity, activity == Activity.USER_CODE ? "" : CALL[what],
                thread == null ? "" : thread.getName(), location(frames, first), top(frames, first));
    }

    /** Where a thread's own stack starts below this class's frames (a rank that diagnoses itself). */
    private static int ownFrames(StackTraceElement[] frames) {
        int first = 0;
        while (first < frames.length && (frames[first].getClassName().equals(Thread.class.getName())
                || frames[first].getClassName().equals(Forensics.class.getName()))) {
            first++;
        }
        return first;
    }

    private static List<String> top(StackTraceElement[] frames, int first) {
        List<String> top = new ArrayList<>(FRAMES);
        for (int i = first; i < frames.length && top.size() < FRAMES; i++) {
            top.add(frames[i].toString());
        }
        return top;
    }

    /** The innermost frame of user code, as {@code "Trainer.step(Trainer.java:88)"}; empty when none. */
    static String location(StackTraceElement[] frames, int first) {
        for (int i = first; i < frames.length; i++) {
            StackTraceElement frame = frames[i];
            if (isUserCode(frame.getClassName())) {
                String type = frame.getClassName().substring(frame.getClassName().lastIndexOf('.') + 1);
                String file = frame.getFileName() == null ? "Unknown Source"
                        : frame.getFileName() + (frame.getLineNumber() >= 0 ? ":" + frame.getLineNumber() : "");
                return type + "." + frame.getMethodName() + "(" + file + ")";
            }
        }
        return "";
    }

    /** Whether a class is neither the JDK's nor one of jnccl's modules' ({@code dev.jnccl.it.X} is a user's). */
    static boolean isUserCode(String className) {
        if (className.startsWith("java.") || className.startsWith("javax.") || className.startsWith("jdk.")
                || className.startsWith("sun.") || className.startsWith("com.sun.")) {
            return false;
        }
        if (!className.startsWith("dev.jnccl.")) {
            return true;
        }
        String rest = className.substring("dev.jnccl.".length());
        int dot = rest.indexOf('.');
        return dot >= 0 && !JNCCL.contains(rest.substring(0, dot));
    }

    /**
     * The watchdog's poll (see {@link DumpWriter#firstSignDue}): the first sign of a hang is dumped.
     * Allocates nothing until then: the watchdog polls often.
     *
     * @param pendingNanos how long the oldest work has been pending, -1 when none is
     */
    void poll(long pendingNanos) {
        if (dumps != null && dumps.firstSignDue(pendingNanos)) {
            dumps.firstSign(summary(), pendingNanos);
        }
    }

    /** {@return this rank's summary before an abort changes it, for {@link #aborted}; null when dumps are off} */
    RankSummary beforeAbort() {
        return dumps == null ? null : summary();
    }

    /**
     * Dumps the abort: with the summary from {@link #beforeAbort} when the abort carries a diagnosis (the
     * state the verdict was made from, so that the offline tool makes it again), else the aborted one.
     *
     * @param before    what {@link #beforeAbort} returned
     * @param reason    the abort's reason
     * @param diagnosis the diagnosis the abort carries, or null
     */
    void aborted(RankSummary before, String reason, Diagnosis diagnosis) {
        if (dumps != null) {
            dumps.aborted(diagnosis != null && before != null ? before : summary(), reason, diagnosis);
        }
    }

    /**
     * The diagnosis of an abort about to happen for {@code trigger}: a peer's of the same failure when
     * the launcher knows one, else made here from the summaries the launcher gathers (bounded by the
     * smaller of 5 s and a quarter of the watchdog's timeout), handed to the launcher, logged once at
     * ERROR with every summary and recorded as the JFR event {@code jnccl.Diagnosis}.
     */
    Diagnosis diagnose(String trigger) {
        // One diagnosis at a time: the rank's thread and its watchdog often see the same failure at once, and
        // the second takes the first's diagnosis instead of a second exchange that waits as long for a dead peer.
        synchronized (diagnosing) {
            Diagnosis known = failures.diagnosis();
            return known != null ? known : diagnoseNow(trigger);
        }
    }

    private Diagnosis diagnoseNow(String trigger) {
        RankSummary own = summary();
        List<RankSummary> all = gather(own);
        boolean complete = all.size() == face.worldSize()
                && all.stream().noneMatch(s -> s.status() == Status.ABSENT);
        Diagnosis made = new Diagnosis(Verdict.of(face.worldSize(), all), all, complete);
        Diagnosis standing = failures.diagnosed(made);
        if (standing == null) {
            standing = made;
        }
        if (standing == made) {
            report(made, trigger);
        }
        return standing;
    }

    /** Every rank's summary from the launcher; this rank's own alone when the launcher fails or answers amiss. */
    private List<RankSummary> gather(RankSummary own) {
        List<RankSummary> all;
        try {
            all = failures.summaries(own, exchangeNanos);
        } catch (RuntimeException e) {
            LOG.warn("rank {}: the exchange of summaries failed; diagnosing from this rank's own", face.rank(), e);
            return List.of(own);
        }
        boolean inOrder = all != null && all.size() == face.worldSize();
        for (int r = 0; inOrder && r < all.size(); r++) {
            inOrder = all.get(r) != null && all.get(r).rank() == r;
        }
        if (!inOrder && !List.of(own).equals(all)) {
            LOG.warn("rank {}: the launcher's summaries are not one per rank in rank order; diagnosing from this"
                    + " rank's own", face.rank());
            return List.of(own);
        }
        return all;
    }

    private void report(Diagnosis diagnosis, String trigger) {
        LOG.error("rank {}: diagnosis of the abort ({}): {}", face.rank(), RankSummary.firstLine(trigger),
                diagnosis.describe());
        Events.Diagnosed event = new Events.Diagnosed();
        if (event.shouldCommit()) {
            event.rank = face.rank();
            event.verdict = diagnosis.verdict();
            event.complete = diagnosis.complete();
            event.trigger = trigger;
            event.summaries = diagnosis.describe();
            event.commit();
        }
    }
}
