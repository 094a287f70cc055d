package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DType;
import dev.jnccl.JncclException;
import dev.jnccl.RankLostException;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.testsupport.NativeEnv;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import dev.jnccl.threads.ThreadsPack;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.opentest4j.AssertionFailedError;

/**
 * The seeded soak of lost ranks in threads mode ({@link ThreadsOptions#withContinueWithoutFailedRanks}):
 * each round draws a world (3 or 4), a victim rank, a fault and the transaction it hits; the victim
 * throws, is interrupted (before its call or while it waits for the collective), or never calls
 * again (it sleeps in user code; the survivors' watchdog names it). The survivors get
 * {@link RankLostException}, recover, agree on the step to go on from, and finish every step at the
 * smaller world with all-reduces, broadcasts and all-gathers of random integers checked element by
 * element against a Java reference. A victim that hangs inside a collective (the host emulation's
 * {@code JNCCL_HOST_FAULT=hang}: its operation never completes until its communicator is aborted)
 * cannot be told from the ranks waiting for it: those rounds check that the pack fails as without
 * the option. Every round ends with no pack thread, and the run with no more
 * threads, file descriptors or {@code /dev/shm} segments than after its first round.
 *
 * <p>{@code -Djnccl.lossSoak.rounds=N} (default 50), {@code -Djnccl.lossSoak.seed=S} replays a run,
 * {@code -Djnccl.lossSoak.round=R} with the seed replays one round (a failure names both).
 */
@Timeout(900)
class ThreadsLossSoakTest {
    private static final int ROUNDS = Integer.getInteger("jnccl.lossSoak.rounds", 50);
    private static final Long FIXED_SEED = Long.getLong("jnccl.lossSoak.seed");
    private static final Integer ONLY_ROUND = Integer.getInteger("jnccl.lossSoak.round");
    private static final int STEPS = 5;
    /**
     * The watchdog of the rounds whose victim hangs: it is what finds the hang. Long enough that a
     * rank merely slow on a loaded machine is not taken for the hung one.
     */
    private static final Duration HANG_WATCHDOG = Duration.ofSeconds(3);

    /** How the victim goes. */
    enum Fault {
        THROWS, HANGS_IN_COLLECTIVE, INTERRUPTED_BEFORE_CALL, INTERRUPTED_IN_WAIT, NEVER_CALLS;

        boolean hangs() {
            return this == HANGS_IN_COLLECTIVE || this == NEVER_CALLS;
        }
    }

    /** The collective of one step, the same on every rank. */
    enum Kind { ALL_REDUCE, BROADCAST, ALL_GATHER }

    /** One round, all drawn from its seed: the victim fails at step {@code step} (its transaction #step+1). */
    record Round(long runSeed, int index, long seed, int world, int victim, Fault fault, int step) {
        static Round plan(long runSeed, int index, List<Fault> faults) {
            long seed = runSeed * 1_000_003L + index;
            SplittableRandom random = new SplittableRandom(seed);
            int world = 3 + random.nextInt(2);
            return new Round(runSeed, index, seed, world, random.nextInt(world), faults.get(random.nextInt(faults.size())),
                    random.nextInt(STEPS));
        }

        Kind kind(int step) {
            return Kind.values()[new SplittableRandom(seed * 17 + step).nextInt(Kind.values().length)];
        }

        int count(int step) {
            return 1 + new SplittableRandom(seed * 19 + step).nextInt(4096);
        }

        String where() {
            return "loss soak seed " + runSeed + " round " + index + " (-Djnccl.lossSoak.seed=" + runSeed
                    + " -Djnccl.lossSoak.round=" + index + ")";
        }

        @Override
        public String toString() {
            return where() + ": world " + world + ", rank " + victim + " " + fault + " at step " + step;
        }
    }

    /** What a survivor saw: its members at the end (original ranks) and how often it recovered. */
    record Seen(List<Integer> members, int recoveries) {}

    @Test
    void survivorsOfRandomLossesFinishCheckedAndLeakNothing() {
        assumeFalse(Packs.SHARE_DEVICES, "runs in the default execution (one device per rank)");
        assumeTrue(Cuda.deviceCount() >= 4, "needs one device per rank, 4 (" + Cuda.deviceCount() + " devices)");
        assumeTrue(Files.isDirectory(Path.of("/proc/self/fd")), "the resource checks read /proc/self");
        List<Fault> faults = Arrays.stream(Fault.values()).filter(f -> f != Fault.HANGS_IN_COLLECTIVE || Packs.onHost())
                .toList();
        long runSeed = FIXED_SEED != null ? FIXED_SEED : Packs.newSeed();
        System.out.println("loss soak seed " + runSeed + ": " + (ONLY_ROUND != null ? "round " + ONLY_ROUND : ROUNDS
                + " rounds") + ", faults " + faults + " (-Djnccl.lossSoak.seed=" + runSeed + " replays it)");
        if (ONLY_ROUND != null) {
            runRound(Round.plan(runSeed, ONLY_ROUND, faults));
            return;
        }
        long start = System.nanoTime();
        runRound(Round.plan(runSeed, 0, faults)); // loads the libraries and the JVM's lazy threads first
        ThreadsSoakTest.Usage baseline = ThreadsSoakTest.Usage.now();
        Map<String, Integer> tally = new TreeMap<>();
        for (int index = 1; index < ROUNDS; index++) {
            Round round = Round.plan(runSeed, index, faults);
            runRound(round);
            tally.merge(round.fault() + " w" + round.world(), 1, Integer::sum);
        }
        System.out.println("loss soak seed " + runSeed + ": " + ROUNDS + " rounds in "
                + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start) + " ms, after the first by fault and world "
                + tally);
        assertNoLeak(baseline, "loss soak seed " + runSeed + " after " + ROUNDS + " rounds");
    }

    private static void assertNoLeak(ThreadsSoakTest.Usage baseline, String where) {
        ThreadsSoakTest.Usage end = ThreadsSoakTest.Usage.now();
        System.out.println(where + ": baseline " + baseline + ", end " + end);
        assertTrue(end.fds() <= baseline.fds() + 8, () -> where + ": open file descriptors grew from " + baseline.fds()
                + " to " + end.fds());
        assertTrue(end.threads() <= baseline.threads() + 8, () -> where + ": threads grew from " + baseline.threads()
                + " to " + end.threads());
        assertTrue(end.shmMappings() <= baseline.shmMappings(), () -> where + ": mappings of /dev/shm/jnccl-* grew from "
                + baseline.shmMappings() + " to " + end.shmMappings());
        Set<String> left = ThreadsSoakTest.Usage.shmNamesLeft(baseline.shmNames(), Duration.ofSeconds(10));
        assertTrue(left.isEmpty(), () -> where + ": shared-memory segments left in /dev/shm: " + left);
    }

    /** Runs one round and checks it; every failure names the round, its seed and its fault. */
    private static void runRound(Round round) {
        System.out.println(round);
        long start = System.nanoTime();
        try {
            checkRound(round);
            Packs.assertNoPackThreads();
            int nativeLeft = ThreadsSoakTest.awaitNoNativePackThreads(Duration.ofSeconds(5));
            assertEquals(0, nativeLeft, "native threads named jnccl-* survived the pack");
        } catch (AssertionError | RuntimeException e) {
            throw new AssertionFailedError(round + ": " + e.getMessage(), e);
        }
        System.out.println("  round " + round.index() + " done in "
                + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start) + " ms");
    }

    private static void checkRound(Round round) {
        ThreadsOptions options = ThreadsOptions.defaults().withContinueWithoutFailedRanks(2);
        if (round.fault().hangs()) {
            options = options.withCommunicator(CommunicatorOptions.defaults().withWatchdog(HANG_WATCHDOG));
        }
        Seen[] seen = new Seen[round.world()];
        // The emulation reads JNCCL_HOST_FAULT when a communicator is made: it is set for the pack's first
        // communicators only (the ranks wait until it is gone), never for the survivors' re-init.
        CountDownLatch started = new CountDownLatch(round.world());
        CountDownLatch faultCleared = new CountDownLatch(1);
        try (ThreadsPack pack = launch(round, options, started, faultCleared, seen)) {
            if (round.fault() == Fault.HANGS_IN_COLLECTIVE) {
                assertStuckFailsThePack(pack);
                return;
            }
            pack.join();
            Map<Integer, Throwable> lost = pack.lostRanks();
            assertEquals(Set.of(round.victim()), lost.keySet(), () -> "lost ranks " + lost);
            assertFalse(pack.hasException(), "the pack has an exception");
        }
        List<Integer> survivors = IntStream.range(0, round.world()).filter(r -> r != round.victim()).boxed().toList();
        for (int rank : survivors) {
            assertEquals(survivors, seen[rank].members(), "members at the end on rank " + rank);
            assertTrue(seen[rank].recoveries() >= 1, "rank " + rank + " never recovered");
        }
    }

    /**
     * A rank hung inside a collective leaves every rank inside the same transaction: the watchdog
     * cannot tell the hung rank from the ones waiting for it (real NCCL cannot either), so nobody is
     * lost and the pack fails as without the option, naming the stuck transaction.
     */
    private static void assertStuckFailsThePack(ThreadsPack pack) {
        JncclException failed = assertThrows(JncclException.class, pack::join);
        assertTrue(failed.getMessage().contains("NCCL or the transport is stuck"), failed::getMessage);
        assertEquals(Map.of(), pack.lostRanks(), "lost ranks");
    }

    private static ThreadsPack launch(Round round, ThreadsOptions options, CountDownLatch started,
                                      CountDownLatch faultCleared, Seen[] seen) {
        String[] env = round.fault() == Fault.HANGS_IN_COLLECTIVE
                ? new String[] {"JNCCL_HOST_FAULT", "hang", "JNCCL_HOST_FAULT_RANK", Integer.toString(round.victim()),
                        "JNCCL_HOST_FAULT_AT", Integer.toString(round.step() + 1)}
                : new String[0];
        ThreadsPack pack;
        try (NativeEnv ignored = NativeEnv.set(env)) {
            pack = ThreadsCommunicators.launch(round.world(), options, comm -> {
                started.countDown();
                await(faultCleared);
                rank(comm, round, seen);
            });
            if (!started.await(60, TimeUnit.SECONDS)) {
                pack.close();
                throw new AssertionFailedError("the pack's ranks did not start within 60 s");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionFailedError("interrupted", e);
        }
        faultCleared.countDown();
        return pack;
    }

    /**
     * One rank: a checked collective per step, then a barrier. A survivor that gets
     * RankLostException recovers, drops the lost members, and the survivors go on from the
     * earliest step any of them has not finished (one may have finished a step that another saw fail).
     */
    private static void rank(Communicator first, Round round, Seen[] seen) {
        int original = first.rank();
        List<Integer> members = new ArrayList<>(IntStream.range(0, round.world()).boxed().toList());
        Communicator comm = first;
        int recoveries = 0;
        int step = 0;
        while (step <= STEPS) {
            boolean victim = original == round.victim() && step == round.step();
            try {
                if (step < STEPS) {
                    checkedStep(comm, round, members, step, victim);
                } else {
                    comm.barrier();
                }
                step++;
            } catch (RankLostException e) {
                for (int lost : e.lostRanks().reversed()) {
                    members.remove(lost); // old ranks are positions in members: remove from the back
                }
                comm = e.recover();
                recoveries++;
                assertEquals(members.size(), comm.worldSize(), "world after the recovery");
                assertEquals(members.indexOf(original), comm.rank(), "rank after the recovery");
                step = (int) Arrays.stream(comm.allGatherLongsHost(step)).min().orElseThrow();
            }
        }
        // GROW BACK (not yet: Communicator grow and replacement ranks come in their own change): here the
        // survivors will admit a replacement rank to get back to round.world(), then run STEPS more checked
        // steps at the full world; Seen then also records the grown communicator's members.
        seen[original] = new Seen(List.copyOf(members), recoveries);
    }

    /** The victim's fault as it happens before its step's call; INTERRUPTED_IN_WAIT happens after the enqueue. */
    private static void failBefore(Round round) {
        switch (round.fault()) {
            case THROWS -> throw new IllegalStateException("injected: " + round);
            case INTERRUPTED_BEFORE_CALL -> Thread.currentThread().interrupt(); // the next wait ends with it
            case NEVER_CALLS -> {
                try {
                    Thread.sleep(Duration.ofSeconds(60)); // user code that hangs; the pack interrupts it
                } catch (InterruptedException e) {
                    throw new IllegalStateException("hung rank interrupted: " + round, e);
                }
                throw new AssertionFailedError(round + ": the hung rank was not interrupted within 60 s");
            }
            case HANGS_IN_COLLECTIVE, INTERRUPTED_IN_WAIT -> { } // in the collective, not before it
        }
    }

    /** This step's collective among {@code members} (original ranks, in the order of the current ranks), checked. */
    private static void checkedStep(Communicator comm, Round round, List<Integer> members, int step, boolean victim) {
        if (victim) {
            failBefore(round);
        }
        Kind kind = round.kind(step);
        int count = round.count(step);
        int world = comm.worldSize();
        int root = step % world;
        long outCount = kind == Kind.ALL_GATHER ? (long) count * world : count;
        try (Arena arena = Arena.ofConfined();
             DeviceMemory in = DeviceMemory.allocate(DType.INT32, count);
             DeviceMemory out = DeviceMemory.allocate(DType.INT32, outCount)) {
            MemorySegment host = arena.allocateFrom(ValueLayout.JAVA_INT, input(round, members.get(comm.rank()), step, count));
            in.copyFromHost(host);
            switch (kind) {
                case ALL_REDUCE -> comm.allReduce(in.tensor(DType.INT32), out.tensor(DType.INT32), ReduceOp.SUM, comm.stream());
                case BROADCAST -> comm.broadcast(in.tensor(DType.INT32), out.tensor(DType.INT32), root, comm.stream());
                case ALL_GATHER -> comm.allGather(in.tensor(DType.INT32), out.tensor(DType.INT32), comm.stream());
            }
            if (victim && round.fault() == Fault.INTERRUPTED_IN_WAIT) {
                Thread.currentThread().interrupt(); // the collective is enqueued: the interrupt ends its wait
            }
            comm.synchronize();
            MemorySegment result = arena.allocate(ValueLayout.JAVA_INT, outCount);
            out.copyToHost(result);
            assertArrayEquals(expected(round, members, step, count, kind, root), result.toArray(ValueLayout.JAVA_INT),
                    () -> kind + " of step " + step + " on rank " + comm.rank() + " of members " + members);
        }
    }

    /** The Java reference: what {@code kind} yields from the members' inputs. */
    private static int[] expected(Round round, List<Integer> members, int step, int count, Kind kind, int root) {
        return switch (kind) {
            case ALL_REDUCE -> {
                int[] sum = new int[count];
                for (int member : members) {
                    int[] theirs = input(round, member, step, count);
                    for (int i = 0; i < count; i++) {
                        sum[i] += theirs[i];
                    }
                }
                yield sum;
            }
            case BROADCAST -> input(round, members.get(root), step, count);
            case ALL_GATHER -> members.stream().flatMapToInt(m -> Arrays.stream(input(round, m, step, count))).toArray();
        };
    }

    /** The input of original rank {@code rank} at {@code step}: random, never all zero. */
    private static int[] input(Round round, int rank, int step, int count) {
        return new SplittableRandom(round.seed() * 31 + rank * 1009L + step).ints(count, -1_000_000, 1_000_000).toArray();
    }

    private static void await(CountDownLatch latch) {
        try {
            if (!latch.await(60, TimeUnit.SECONDS)) {
                throw new IllegalStateException("not released within 60 s");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted before the first step", e);
        }
    }
}
