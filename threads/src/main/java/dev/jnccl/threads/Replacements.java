package dev.jnccl.threads;

import dev.jnccl.Communicator;
import dev.jnccl.GrowTicket;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.spi.Modes;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The spare devices of one launch ({@link ThreadsOptions#withReplacementDevices}) and the replacement
 * ranks started on them. A loss is answered once per pack and set of lost ranks (every survivor gets
 * the same answer, also when it recovers twice), reserving that many spares; the survivors' rank 0
 * then has the pack start them with the grow's ticket ({@link #start}), once per ticket. A
 * replacement runs the launch's work with its communicator of the grown world, knowing it is one
 * ({@link ThreadsCommunicators#isReplacement()}).
 */
final class Replacements {
    private static final Logger LOG = LoggerFactory.getLogger(Replacements.class);
    /** Bound while a replacement's work runs: what {@link ThreadsCommunicators#isReplacement()} answers. */
    static final ScopedValue<Boolean> REPLACEMENT = ScopedValue.newInstance();

    /** One loss: the pack that lost ranks (by identity) and the ranks. */
    private record Loss(PackState pack, List<Integer> lost) {}

    private final PackState root;
    private final ThreadsOptions options;
    private final Consumer<Communicator> work;
    private final Deque<Integer> spares;
    /** Spares promised to answered losses, not yet started. */
    private final Deque<Integer> reserved = new ArrayDeque<>();
    private final Map<Loss, Integer> answers = new HashMap<>();
    private final Set<GrowTicket> started = new HashSet<>();
    private final List<Thread> threads = new ArrayList<>();
    private final List<Integer> used = new ArrayList<>();
    /** Per index into {@link #used}: the replacement's grown world and its rank there (where its loss is recorded). */
    private final List<Started> ranks = new ArrayList<>();

    /** A started replacement: rank {@code rank} of the grown world {@code grown}. */
    private record Started(PackState grown, int rank) {}

    Replacements(PackState root, ThreadsOptions options, Consumer<Communicator> work) {
        this.root = root;
        this.options = options;
        this.work = work;
        this.spares = new ArrayDeque<>(options.replacementDevices());
    }

    /** How many of {@code lost} ranks of {@code pack} are replaced: one per rank while spares are left. */
    synchronized int answer(PackState pack, List<Integer> lost) {
        return answers.computeIfAbsent(new Loss(pack, List.copyOf(lost)), loss -> {
            int count = Math.min(lost.size(), spares.size());
            for (int i = 0; i < count; i++) {
                reserved.add(spares.poll());
            }
            return count;
        });
    }

    /** Starts the replacement ranks of {@code ticket} on reserved spares (once per ticket), in the grown world's pack. */
    void start(GrowTicket ticket, PackState grown) {
        List<Thread> toStart = new ArrayList<>();
        synchronized (this) {
            if (!started.add(ticket)) {
                return;
            }
            for (int rank = ticket.fromWorld(); rank < ticket.toWorld(); rank++) {
                Integer device = reserved.poll();
                if (device == null) {
                    throw new IllegalStateException("replace: no spare device reserved for rank " + rank + " of "
                            + ticket);
                }
                int r = rank;
                used.add(device);
                ranks.add(new Started(grown, rank));
                Thread thread = Thread.ofPlatform().name("jnccl-rank-" + rank + "-replacement").daemon(true)
                        .unstarted(() -> run(ticket, r, device, grown));
                threads.add(thread);
                toStart.add(thread);
            }
        }
        LOG.info("starting {} replacement rank(s) of {} on devices {}", toStart.size(), ticket, used);
        toStart.forEach(Thread::start);
    }

    /** {@return the replacement threads started so far} */
    synchronized List<Thread> threads() {
        return List.copyOf(threads);
    }

    /** {@return the devices replacements were started on, in start order} */
    synchronized List<Integer> usedDevices() {
        return List.copyOf(used);
    }

    /**
     * {@return each lost replacement, by its index in {@link #usedDevices}, with what made it lost}
     * As its grown world recorded the loss: also one a hang verdict lost whose thread has not ended.
     */
    SortedMap<Integer, Throwable> lostErrors() {
        List<Started> snapshot;
        synchronized (this) { // copied first: a grown world's lock is not taken under this one
            snapshot = List.copyOf(ranks);
        }
        SortedMap<Integer, Throwable> errors = new TreeMap<>();
        for (int i = 0; i < snapshot.size(); i++) {
            Throwable why = snapshot.get(i).grown().lostErrors().get(snapshot.get(i).rank());
            if (why != null) {
                errors.put(i, why);
            }
        }
        return errors;
    }

    /**
     * A replacement rank: joins the grown world, runs the work, closes. Its failure is lost in the
     * grown world (the survivors may recover again) or, where that fails the grown world, fails the
     * launch (so that {@link ThreadsPack#join()} reports it).
     */
    private void run(GrowTicket ticket, int rank, int device, PackState grown) {
        Communicator communicator = null;
        try {
            Cuda.setDevice(device);
            communicator = Modes.joinGrow(ticket, rank, device, options.communicator(),
                    ThreadsHost.parts(grown, options, rank));
            grown.working(rank, true);
            Communicator joined = communicator;
            try {
                ScopedValue.where(REPLACEMENT, Boolean.TRUE).run(() -> work.accept(joined));
            } finally {
                if (grown.working(rank, false)) {
                    Thread.interrupted(); // the pack's own interrupt (it failed): not for the close below
                }
            }
        } catch (Throwable t) {
            LOG.warn("replacement rank {} of {} (device {}) failed", rank, ticket, device, t);
            if (communicator == null) {
                grown.fail(rank, t); // in its init: the survivors' grow ends at once, as a rank's failed init does
            } else {
                grown.lose(rank, t);
            }
            if (grown.failure() != null) {
                root.fail(-1, t);
            }
        } finally {
            grown.finished(rank);
            if (communicator != null) {
                try {
                    communicator.close();
                } catch (Throwable t) {
                    root.fail(-1, t);
                }
            }
        }
    }
}
