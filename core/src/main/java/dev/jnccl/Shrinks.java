package dev.jnccl;

import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NcclElasticCalls;
import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.internal.Deadlines;
import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.Membership;
import dev.jnccl.spi.RankParts;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.ReentrantLock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The shrink of one {@link Communicator} to its survivors ({@link Communicator#shrink}): the checks,
 * the choice of path, the survivors' agreement, the new communicator, and the one result (a second
 * shrink with the same ranks returns it again: {@link RankLostException#recover()} is idempotent).
 *
 * <p>Two paths make the survivors' communicator. <b>nccl</b>: {@code ncclCommShrink} of this
 * communicator (NCCL 2.27+), fast, but only while it is healthy: once a collective is pending on a
 * dead rank, NCCL fails every shrink ("remote process exited"), so a communicator that is aborted,
 * reports an asynchronous error or still has work on its comms stream takes the other path.
 * <b>reinit</b>: always available; the new rank 0 makes a fresh unique id, the survivors' host side
 * hands it to every survivor, each inits a new communicator on the same device with the same options.
 * The survivors agree over their host side before either path (every survivor must take the same
 * one), and after the nccl path (one survivor's failure sends them all to reinit, nobody keeps a
 * half-made communicator). This communicator is aborted afterwards, never destroyed (destroying the
 * parent of an aborting shrink hangs on newer NCCL).
 *
 * <p>The system property {@code jnccl.shrink.path} picks: {@code auto} (the default, as above),
 * {@code nccl} (NCCL's shrink whenever this communicator's handles are alive and NCCL has it, healthy
 * or not; for tests of that path), {@code reinit} (never NCCL's shrink).
 */
final class Shrinks {
    private static final Logger LOG = LoggerFactory.getLogger(Shrinks.class);
    /** The system property that picks the path. */
    static final String PATH_PROPERTY = "jnccl.shrink.path";

    /** The setting of {@link #PATH_PROPERTY}. */
    enum Setting { AUTO, NCCL, REINIT }

    /** A shrink made: its excluded ranks and the survivors' communicator. */
    private record Done(List<Integer> excluded, Communicator survivors) {}

    private final Communicator face;
    private final int rank;
    private final int worldSize;
    private final ReentrantLock nativeLock;
    private final NcclComm comm;
    private final CudaStream stream;
    private final LoadedLibraries libraries;
    /** The thread shrinking now, or null. */
    private final AtomicReference<Thread> running = new AtomicReference<>();
    private volatile Done done;
    /** Tests: a failure this rank reports after its NCCL shrink succeeded (the others must then re-init too). */
    private volatile String injectedFailure;
    /** The survivors' parts while no communicator owns them (the running shrink's; see {@link #release}). */
    private RankParts unowned;

    Shrinks(Communicator face, int rank, int worldSize, ReentrantLock nativeLock, NcclComm comm, CudaStream stream,
            LoadedLibraries libraries) {
        this.face = face;
        this.rank = rank;
        this.worldSize = worldSize;
        this.nativeLock = nativeLock;
        this.comm = comm;
        this.stream = stream;
        this.libraries = libraries;
    }

    /** See {@link Communicator#shrink}. */
    Communicator shrink(int[] excludedRanks) {
        List<Integer> excluded = checkExcluded(excludedRanks, rank, worldSize);
        Setting setting = setting();
        Done made = done;
        if (made != null) {
            return same(made, excluded);
        }
        Thread me = Thread.currentThread();
        Thread other = running.compareAndExchange(null, me);
        if (other != null) {
            throw new IllegalStateException("shrink: thread " + other.getName() + " is already shrinking the"
                    + " communicator of rank " + rank + " of " + worldSize);
        }
        try {
            made = done; // a shrink that ended between the first look and the claim
            if (made != null) {
                return same(made, excluded);
            }
            face.requireShrinkable();
            Communicator survivors = run(excluded, setting);
            done = new Done(excluded, survivors);
            return survivors;
        } finally {
            running.set(null);
        }
    }

    /** Tests: this rank's NCCL shrink is to fail with {@code why} after NCCL made the new communicator. */
    void injectNcclFailure(String why) {
        injectedFailure = why;
    }

    /** The communicator a shrink made, or null. */
    Communicator survivors() {
        Done made = done;
        return made == null ? null : made.survivors();
    }

    private Communicator same(Done made, List<Integer> excluded) {
        if (!made.excluded().equals(excluded)) {
            throw new IllegalStateException("shrink: the communicator of rank " + rank + " of " + worldSize
                    + " was already shrunk without ranks " + made.excluded() + "; it cannot be shrunk again without "
                    + excluded + " (shrink the survivors' communicator instead)");
        }
        return made.survivors();
    }

    /**
     * The excluded ranks, checked and sorted: given, not empty, each in range, no duplicates, not this
     * rank, not every rank.
     */
    static List<Integer> checkExcluded(int[] excludedRanks, int rank, int worldSize) {
        if (excludedRanks == null) {
            throw new IllegalArgumentException("shrink: excludedRanks is null");
        }
        if (excludedRanks.length == 0) {
            throw new IllegalArgumentException("shrink: excludedRanks is empty: name at least one rank in [0, "
                    + worldSize + ") to exclude");
        }
        if (excludedRanks.length >= worldSize) {
            throw new IllegalArgumentException("shrink: excludedRanks " + Arrays.toString(excludedRanks) + " names "
                    + excludedRanks.length + " ranks of a world of " + worldSize + ": at least one must survive");
        }
        int[] sorted = excludedRanks.clone();
        Arrays.sort(sorted);
        for (int i = 0; i < sorted.length; i++) {
            int excluded = sorted[i];
            if (excluded < 0 || excluded >= worldSize) {
                throw new IllegalArgumentException("shrink: excluded rank " + excluded + " out of range [0, "
                        + worldSize + ")");
            }
            if (i > 0 && sorted[i - 1] == excluded) {
                throw new IllegalArgumentException("shrink: excluded rank " + excluded + " is named twice in "
                        + Arrays.toString(excludedRanks));
            }
            if (excluded == rank) {
                throw new IllegalArgumentException("shrink: excluded rank " + excluded + " is this rank: only"
                        + " survivors call shrink");
            }
        }
        return Arrays.stream(sorted).boxed().toList();
    }

    /** Refuses {@code operation} when the loaded NCCL lacks {@code feature}, naming the version it needs and the one loaded. */
    static void requireFeature(String operation, NcclFeature feature, LoadedLibraries libraries) {
        if (!libraries.supports(feature)) {
            throw new UnsupportedOperationException(operation + ": needs NCCL " + LibraryVersion.of(feature.sinceVersion())
                    + " or newer (" + feature.name() + "); the loaded NCCL is " + LibraryVersion.of(libraries.ncclVersion())
                    + " (" + libraries.ncclPath() + ")");
        }
    }

    /** {@return the setting of {@link #PATH_PROPERTY}, checked} */
    static Setting setting() {
        String value = System.getProperty(PATH_PROPERTY, "auto");
        return switch (value.trim().toLowerCase(java.util.Locale.ROOT)) {
            case "auto", "" -> Setting.AUTO;
            case "nccl" -> Setting.NCCL;
            case "reinit" -> Setting.REINIT;
            default -> throw new IllegalArgumentException("shrink: " + PATH_PROPERTY + " is \"" + value
                    + "\"; allowed: auto, nccl, reinit");
        };
    }

    /**
     * The shrink itself, bounded by the init timeout: the survivors' host side first, then the path
     * they agree on. Whatever fails, this communicator ends aborted and no new one is left.
     */
    private Communicator run(List<Integer> excluded, Setting setting) {
        long started = System.nanoTime();
        Events.Shrink event = new Events.Shrink();
        event.begin();
        long deadline = Deadlines.deadline(face.options().initTimeout());
        List<Integer> members = survivors(excluded);
        Membership membership = new Membership(face, 0, rank, members.indexOf(rank), members);
        RankParts parts = Objects.requireNonNull(face.hostSide().shrink(membership),
                "shrink: the launcher made no parts");
        String reason = "shrunk to " + members.size() + " ranks without ranks " + excluded;
        unowned = parts;
        try {
            Made made = make(excluded, membership, parts, setting, deadline, reason);
            LOG.info("rank {} of {}: {} by the {} path in {} ms: now rank {} of {}{}", rank, worldSize, reason,
                    made.path, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started), membership.rank(),
                    members.size(), made.why == null ? "" : " (" + made.why + ")");
            record(event, excluded, members.size(), made.path);
            return made.survivors;
        } catch (RuntimeException | Error e) {
            face.retire(reason + " failed: " + e.getMessage(), excluded);
            release(e);
            throw e;
        }
    }

    /**
     * The survivors' parts that no communicator took (the shrink failed before one was made of
     * them) are closed as a communicator's close would: the launcher's transport and its
     * accounting of the survivors (threads mode frees the survivors' shared events once all left).
     */
    private void release(Throwable failure) {
        RankParts parts = unowned;
        unowned = null;
        releaseParts(parts, failure);
    }

    /** Closes {@code parts} (null: nothing) that no communicator took, as {@link #release} says; a grow's too. */
    static void releaseParts(RankParts parts, Throwable failure) {
        if (parts == null) {
            return;
        }
        try {
            parts.transport().close();
            parts.events().closed(true);
        } catch (RuntimeException e) {
            failure.addSuppressed(e);
        }
    }

    /** The survivors' communicator made of {@code parts}, which it owns from now on (also when this fails). */
    private Communicator successor(Membership membership, RankParts parts, ReentrantLock lock,
                                   java.util.function.Function<ReentrantLock, NcclComm> connect) {
        unowned = null;
        return Communicator.successor(membership, parts, lock, connect);
    }

    /** The survivors' communicator and how it was made ({@code why}: why not by NCCL's shrink, or null). */
    private record Made(Communicator survivors, String path, String why) {}

    /**
     * The survivors agree on the path, and it makes their communicator: NCCL's shrink, kept only when
     * it succeeded on every survivor (else each aborts its own and they all re-init). This
     * communicator is retired before the re-init (its pending work, stuck on a lost rank, would
     * hold the device) and after NCCL's shrink (which needs it alive).
     */
    private Made make(List<Integer> excluded, Membership membership, RankParts parts, Setting setting,
                      long deadline, String reason) {
        HostSide host = parts.host();
        String unfit = setting == Setting.REINIT ? PATH_PROPERTY + "=reinit"
                : unfitForNcclShrink(setting == Setting.AUTO);
        String why = agree(host, unfit, deadline);
        if (why == null) {
            ReentrantLock lock = new ReentrantLock();
            NcclComm shrunk = null;
            String failed = null;
            try {
                shrunk = shrinkInNccl(excluded.stream().mapToInt(Integer::intValue).toArray(), membership,
                        setting, Deadlines.remainingNanos(deadline), parts, lock);
                if (injectedFailure != null) {
                    shrunk.abort();
                    shrunk = null;
                    throw new IllegalStateException(injectedFailure);
                }
            } catch (RuntimeException e) {
                failed = "ncclCommShrink failed: " + e.getMessage();
                LOG.warn("rank {}: {}", rank, failed);
            }
            why = agree(host, failed, deadline);
            if (why == null) {
                NcclComm adopted = shrunk;
                face.retire(reason, excluded);
                try {
                    return new Made(successor(membership, parts, lock, l -> adopted), "nccl", null);
                } catch (RuntimeException | Error e) {
                    adopted.abort(); // as a split's: a communicator that was not made leaves no NCCL handle
                    throw e;
                }
            }
            if (shrunk != null) {
                shrunk.abort(); // another survivor's shrink failed: nobody keeps this one
            }
        }
        face.retire(reason + " (by re-init: " + why + ")", excluded);
        return new Made(reinit(host, membership, parts, deadline), "reinit", why);
    }

    /**
     * Why NCCL's shrink cannot make this rank's survivors' communicator, or null when it can: NCCL
     * has it and the communicator's handles are alive; when {@code healthy} (the automatic choice)
     * also no asynchronous error and nothing pending on the comms stream.
     */
    private String unfitForNcclShrink(boolean healthy) {
        return unfitFor(NcclFeature.SHRINK, "ncclCommShrink", healthy);
    }

    /**
     * Why NCCL's {@code feature} (shrink, grow) cannot derive a communicator of this one, or null
     * when it can: see {@link #unfitForNcclShrink}.
     */
    String unfitFor(NcclFeature feature, String function, boolean healthy) {
        if (!libraries.supports(feature)) {
            return "NCCL " + face.ncclVersion() + " has no " + function;
        }
        nativeLock.lock();
        try {
            if (comm.isReleased() || !face.isOpenOrRevoked()) {
                return "its communicator was aborted" + (face.abortReason() == null ? "" : ": " + face.abortReason());
            }
            String failure = healthy ? comm.asyncFailure() : null;
            if (failure != null) {
                return failure;
            }
            if (healthy) {
                face.joinReplays(); // a replay running on another stream is pending work too
            }
            return healthy && !stream.isIdle() ? "work is pending on its comms stream" : null;
        } catch (RuntimeException e) {
            return "its state cannot be read: " + e.getMessage();
        } finally {
            nativeLock.unlock();
        }
    }

    /**
     * NCCL's shrink of the communicator (see {@link NcclComm#shrink}); the survivors' failures cancel
     * the wait. A communicator that is not healthy (only {@code jnccl.shrink.path=nccl} gets here with
     * one) is shrunk with {@code NCCL_SHRINK_ABORT}, as NCCL asks for a communicator in error.
     */
    private NcclComm shrinkInNccl(int[] excluded, Membership membership, Setting setting, long timeoutNanos,
                                  RankParts parts, ReentrantLock newLock) {
        int flags = setting == Setting.NCCL && unfitForNcclShrink(true) != null ? NcclElasticCalls.NCCL_SHRINK_ABORT
                : NcclElasticCalls.NCCL_SHRINK_DEFAULT;
        nativeLock.lock();
        try {
            return comm.shrink(excluded, flags, membership.rank(), membership.worldSize(),
                    java.time.Duration.ofNanos(timeoutNanos), parts.failures()::cancellation, newLock);
        } finally {
            nativeLock.unlock();
        }
    }

    /**
     * Whether every survivor can take the NCCL path: null when all can, else why not (this rank's
     * reason first, else the first survivor's that said no).
     */
    private String agree(HostSide host, String unfit, long deadline) {
        return agree(host, rank, unfit, deadline);
    }

    /** {@link #agree(HostSide, String, long)} of {@code rank} (a grow's agreement too). */
    static String agree(HostSide host, int rank, String unfit, long deadline) {
        byte[] mine = unfit == null ? new byte[0] : ("rank " + rank + ": " + unfit)
                .getBytes(java.nio.charset.StandardCharsets.UTF_8);
        for (byte[] answer : host.allGather(mine, Deadlines.remainingNanos(deadline))) {
            if (answer.length > 0) {
                String no = new String(answer, java.nio.charset.StandardCharsets.UTF_8);
                return unfit != null ? "rank " + rank + ": " + unfit : no;
            }
        }
        return null;
    }

    /**
     * The re-init path: the survivors' new rank 0 makes a unique id, the survivors' host side hands
     * it to all, and each inits a new communicator (same device and options) before the deadline.
     */
    private Communicator reinit(HostSide host, Membership membership, RankParts parts, long deadline) {
        byte[] mine = membership.rank() == 0 ? UniqueId.generate().bytes() : new byte[0];
        UniqueId id = UniqueId.fromBytes(host.allGather(mine, Deadlines.remainingNanos(deadline)).getFirst());
        java.time.Duration left = java.time.Duration.ofNanos(Deadlines.remainingNanos(deadline));
        return successor(membership, parts, new ReentrantLock(), l -> NcclComm.init(id,
                membership.rank(), membership.worldSize(), face.device(), face.options(), left,
                parts.failures()::cancellation, l));
    }

    private List<Integer> survivors(List<Integer> excluded) {
        List<Integer> members = new ArrayList<>(worldSize - excluded.size());
        for (int r = 0; r < worldSize; r++) {
            if (!excluded.contains(r)) {
                members.add(r);
            }
        }
        return members;
    }

    /** Commits the JFR {@code jnccl.Shrink} event begun when the shrink began (its duration is the shrink's). */
    private void record(Events.Shrink event, List<Integer> excluded, int toWorld, String path) {
        event.end();
        if (event.shouldCommit()) {
            event.rank = rank;
            event.fromWorld = worldSize;
            event.toWorld = toWorld;
            event.excluded = excluded.toString();
            event.path = path;
            event.commit();
        }
    }
}
