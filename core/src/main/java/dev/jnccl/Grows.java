package dev.jnccl;

import dev.jnccl.bindings.BackendSetting;
import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.internal.Deadlines;
import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.RankParts;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.ReentrantLock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The grow of one {@link Communicator} ({@link Communicator#growTicket}, {@link Communicator#grow})
 * and the new ranks' side ({@link Communicator#joinGrow}): the checks, the choice of path, the
 * ticket, the grown communicator, and the one result.
 *
 * <p>Two paths, as for a shrink. <b>nccl</b>: {@code ncclCommGrow} (NCCL 2.29.2+) of this healthy
 * communicator (not aborted, no asynchronous error, nothing pending on its comms stream, as NCCL
 * asks); rank 0 gets the grow's id from {@code ncclCommGetUniqueId}. <b>reinit</b>: every rank, old
 * and new, inits a new communicator with a fresh unique id made by rank 0. The existing ranks agree
 * on the path over their host side when the ticket is made, and the ticket carries it to the new
 * ranks, so every rank takes the same one. This communicator is retired (aborted, never destroyed)
 * once the grown one is made, before it on the reinit path, and also when the grow fails: NCCL
 * leaves the parent of a grow to be freed, and a half-grown world cannot go on.
 *
 * <p>The system property {@code jnccl.grow.path} picks: {@code auto} (the default, as above),
 * {@code nccl} (NCCL's grow, refused with the version needed on an NCCL without it), {@code reinit}.
 */
final class Grows {
    private static final Logger LOG = LoggerFactory.getLogger(Grows.class);
    /** The system property that picks the path. */
    static final String PATH_PROPERTY = "jnccl.grow.path";

    private final Communicator face;
    private final int rank;
    private final int worldSize;
    private final ReentrantLock nativeLock;
    private final NcclComm comm;
    private final LoadedLibraries libraries;
    /** The thread growing now (ticket or grow), or null. */
    private final AtomicReference<Thread> running = new AtomicReference<>();
    private volatile GrowTicket ticket;
    private volatile Communicator grown;

    Grows(Communicator face, int rank, int worldSize, ReentrantLock nativeLock, NcclComm comm,
          LoadedLibraries libraries) {
        this.face = face;
        this.rank = rank;
        this.worldSize = worldSize;
        this.nativeLock = nativeLock;
        this.comm = comm;
        this.libraries = libraries;
    }

    /** See {@link Communicator#growTicket}. */
    GrowTicket ticket(int newWorldSize) {
        if (newWorldSize <= worldSize) {
            throw new IllegalArgumentException("growTicket: newWorldSize " + newWorldSize + " out of range ["
                    + (worldSize + 1) + ", " + Integer.MAX_VALUE + "]: a grow adds ranks to the " + worldSize
                    + " of rank " + rank);
        }
        Shrinks.Setting setting = setting();
        claim("growTicket");
        try {
            face.requireShrinkable("growTicket");
            GrowTicket made = ticket;
            if (made != null) {
                if (made.toWorld() != newWorldSize) {
                    throw new IllegalStateException("growTicket: the communicator of rank " + rank + " already has"
                            + " the ticket of a grow to " + made.toWorld() + " ranks, not " + newWorldSize);
                }
                return made;
            }
            made = agreeOnTicket(newWorldSize, setting);
            ticket = made;
            return made;
        } finally {
            running.set(null);
        }
    }

    /** See {@link Communicator#grow}. */
    Communicator grow(GrowTicket given) {
        return grow(given, () -> {});
    }

    /**
     * See {@link Communicator#grow}; {@code started} runs once this rank's part of the grow has
     * started (NCCL accepted its call; before the init of the re-init path), so that a launcher
     * starts the new ranks only then.
     */
    private Communicator grow(GrowTicket given, Runnable started) {
        if (given == null) {
            throw new IllegalArgumentException("grow: ticket is null");
        }
        claim("grow");
        try {
            Communicator made = grown;
            GrowTicket mine = ticket;
            if (mine == null || !mine.equals(given)) {
                throw new IllegalArgumentException("grow: " + given + " is not the ticket of this communicator (rank "
                        + rank + " of " + worldSize + (mine == null ? ", which made none: call growTicket first)"
                        : ", whose ticket is " + mine + ")"));
            }
            if (made != null) {
                return made;
            }
            face.requireShrinkable("grow");
            made = run(given, started);
            grown = made;
            return made;
        } finally {
            running.set(null);
        }
    }

    /**
     * {@link RankLostException#recover()}: the survivors' communicator of {@code lost}, grown back by
     * the replacements the launcher starts ({@link dev.jnccl.spi.Failures#replacements}), if any.
     */
    static Communicator recover(Communicator comm, List<Integer> lost) {
        Communicator survivors = comm.shrink(lost.stream().mapToInt(Integer::intValue).toArray());
        int added = comm.failures().replacements(lost);
        if (added <= 0) {
            return survivors;
        }
        GrowTicket made = survivors.growTicket(survivors.worldSize() + added);
        // The coordinator of NCCL's grow (rank 0) has the replacements started once its grow has.
        Runnable replace = survivors.rank() != 0 ? () -> {} : () -> {
            try {
                survivors.failures().replace(made);
            } catch (RuntimeException e) { // then the grow ends at its deadline, or when the launcher fails it
                LOG.error("rank 0 of {}: the launcher could not start the replacements of {}", survivors.worldSize(),
                        made, e);
            }
        };
        return survivors.grows().grow(made, replace);
    }

    /** The communicator a grow made, or null. */
    Communicator grown() {
        return grown;
    }

    private void claim(String operation) {
        Thread other = running.compareAndExchange(null, Thread.currentThread());
        if (other != null) {
            throw new IllegalStateException(operation + ": thread " + other.getName() + " is already growing the"
                    + " communicator of rank " + rank + " of " + worldSize);
        }
    }

    /** {@return the setting of {@link #PATH_PROPERTY}, checked} */
    static Shrinks.Setting setting() {
        String value = System.getProperty(PATH_PROPERTY, "auto");
        return switch (value.trim().toLowerCase(java.util.Locale.ROOT)) {
            case "auto", "" -> Shrinks.Setting.AUTO;
            case "nccl" -> Shrinks.Setting.NCCL;
            case "reinit" -> Shrinks.Setting.REINIT;
            default -> throw new IllegalArgumentException("grow: " + PATH_PROPERTY + " is \"" + value
                    + "\"; allowed: auto, nccl, reinit");
        };
    }

    /**
     * The existing ranks agree on the path (NCCL's only when every rank can take it), rank 0 makes
     * the id of that path and hands the ticket to all, before the init timeout.
     */
    private GrowTicket agreeOnTicket(int newWorldSize, Shrinks.Setting setting) {
        if (setting == Shrinks.Setting.NCCL) {
            Shrinks.requireFeature("grow (" + PATH_PROPERTY + "=nccl)", NcclFeature.GROW, libraries);
        }
        long deadline = Deadlines.deadline(face.options().initTimeout());
        HostSide host = face.hostSide();
        String unfit = setting == Shrinks.Setting.REINIT ? PATH_PROPERTY + "=reinit"
                : face.shrinks().unfitFor(NcclFeature.GROW, "ncclCommGrow", setting == Shrinks.Setting.AUTO);
        String why = Shrinks.agree(host, rank, unfit, deadline);
        byte[] mine = new byte[0];
        if (rank == 0) {
            GrowTicket.Path path = why == null ? GrowTicket.Path.NCCL : GrowTicket.Path.REINIT;
            mine = new GrowTicket(path, worldSize, newWorldSize, path == GrowTicket.Path.NCCL ? growId()
                    : UniqueId.generate()).bytes();
        }
        GrowTicket made = GrowTicket.fromBytes(host.allGather(mine, Deadlines.remainingNanos(deadline)).getFirst());
        if (made.toWorld() != newWorldSize) {
            throw new IllegalArgumentException("growTicket: rank 0 grows to " + made.toWorld() + " ranks, rank " + rank
                    + " asked for " + newWorldSize + " (every rank passes the same size)");
        }
        LOG.info("rank {} of {}: a grow to {} ranks will take the {} path{}", rank, worldSize, newWorldSize,
                name(made.path()), why == null ? "" : " (" + why + ")");
        return made;
    }

    private UniqueId growId() {
        nativeLock.lock();
        try {
            return comm.growId();
        } finally {
            nativeLock.unlock();
        }
    }

    /** The grow itself, bounded by the init timeout; whatever fails, this communicator ends retired. */
    private Communicator run(GrowTicket given, Runnable onStart) {
        long started = System.nanoTime();
        Events.Grow event = new Events.Grow();
        event.begin();
        long deadline = Deadlines.deadline(face.options().initTimeout());
        String reason = "grown to " + given.toWorld() + " ranks by the " + name(given.path()) + " path";
        RankParts parts = Objects.requireNonNull(face.hostSide().grow(face, given), "grow: the launcher made no parts");
        try {
            Communicator made = given.path() == GrowTicket.Path.NCCL ? byNccl(given, parts, deadline, reason, onStart)
                    : byReinit(given, parts, deadline, reason, onStart);
            LOG.info("rank {} of {}: {} in {} ms", rank, worldSize, reason,
                    TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started));
            record(event, rank, worldSize, given);
            return made;
        } catch (RuntimeException | Error e) {
            face.retire(reason + " failed: " + e.getMessage());
            if (!parts.equals(adopted)) {
                Shrinks.releaseParts(parts, e);
            }
            throw e;
        }
    }

    /** The parts a grown communicator took (it closes them from then on). */
    private RankParts adopted;

    /**
     * NCCL's grow of this (alive) communicator, then this one retired. NCCL wants the id from the
     * coordinator only; the host emulation meets by id on every rank, so there every rank passes it.
     */
    private Communicator byNccl(GrowTicket given, RankParts parts, long deadline, String reason, Runnable started) {
        boolean passId = rank == 0 || libraries.backend() == BackendSetting.HOST;
        ReentrantLock lock = new ReentrantLock();
        NcclComm made;
        nativeLock.lock();
        try {
            made = comm.grow(given.id(), passId, given.toWorld(), left(deadline), parts.failures()::cancellation, lock,
                    started);
        } finally {
            nativeLock.unlock();
        }
        face.retire(reason);
        adopted = parts;
        try {
            return Communicator.grown(face, given.toWorld(), parts, lock, l -> made);
        } catch (RuntimeException | Error e) {
            made.abort(); // as a split's: a communicator that was not made leaves no NCCL handle
            throw e;
        }
    }

    /** The re-init path: this communicator retired first (it may hold the device), then a new init. */
    private Communicator byReinit(GrowTicket given, RankParts parts, long deadline, String reason,
                                  Runnable started) {
        face.retire(reason);
        started.run(); // an init waits for every rank, whichever comes first
        adopted = parts;
        Duration left = left(deadline);
        return Communicator.grown(face, given.toWorld(), parts, new ReentrantLock(), l -> NcclComm.init(given.id(),
                rank, given.toWorld(), face.device(), face.options(), left, parts.failures()::cancellation, l));
    }

    /**
     * A new rank's NCCL communicator of the grow {@code given}: NCCL's grow from no communicator, or
     * the init of the re-init path.
     */
    static NcclComm join(GrowTicket given, int rank, int device, CommunicatorOptions options,
                         java.util.function.Supplier<String> cancellation, ReentrantLock lock) {
        if (given.path() == GrowTicket.Path.NCCL) {
            Shrinks.requireFeature("joinGrow (a ticket of NCCL's grow)", NcclFeature.GROW, NcclCalls.libraries());
            return NcclComm.joinGrow(given.id(), rank, given.toWorld(), device, options, options.initTimeout(),
                    cancellation, lock);
        }
        return NcclComm.init(given.id(), rank, given.toWorld(), device, options, options.initTimeout(), cancellation,
                lock);
    }

    /** The new rank's checks of {@link Communicator#joinGrow}, before anything native. */
    static void checkJoin(GrowTicket given, int rank, CommunicatorOptions options) {
        if (given == null) {
            throw new IllegalArgumentException("joinGrow: ticket is null");
        }
        if (options == null) {
            throw new IllegalArgumentException("joinGrow: options are null");
        }
        if (rank < given.fromWorld() || rank >= given.toWorld()) {
            throw new IllegalArgumentException("joinGrow: rank " + rank + " out of range [" + given.fromWorld() + ", "
                    + given.toWorld() + "): a new rank of " + given + " takes one of the added ranks");
        }
    }

    private static Duration left(long deadline) {
        return Duration.ofNanos(Deadlines.remainingNanos(deadline));
    }

    private static String name(GrowTicket.Path path) {
        return path.name().toLowerCase(java.util.Locale.ROOT);
    }

    /** Commits the JFR {@code jnccl.Grow} event begun when the grow began (its duration is the grow's). */
    static void record(Events.Grow event, int rank, int fromWorld, GrowTicket given) {
        event.end();
        if (event.shouldCommit()) {
            event.rank = rank;
            event.fromWorld = fromWorld;
            event.toWorld = given.toWorld();
            event.path = name(given.path());
            event.commit();
        }
    }
}
