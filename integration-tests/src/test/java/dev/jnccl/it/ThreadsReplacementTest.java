package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DType;
import dev.jnccl.RankLostException;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import dev.jnccl.threads.ThreadsPack;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.LongStream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Threads mode replacing a lost rank ({@link ThreadsOptions#withReplacementDevices}): at world 4,
 * rank 3 throws, is interrupted or hangs at a seeded random step; the three survivors' {@code
 * recover()} shrinks to 3 and grows back to 4 with a replacement rank that the pack starts on the
 * spare device. Every rank, the replacement too, checks each step's all-reduce of random integers
 * element by element against the sum of the members' inputs, at world 4 before and after; the
 * members after the recovery are the survivors in their old order, then the replacement. No thread
 * of the pack is left. A pair (2 -> 1 -> 2) by each path of the grow also runs in the GPU machine's
 * threads multi-rank suite, both ranks and the spare on the one GPU (NCCL 2.30.7: ncclCommGrow).
 */
@Timeout(120)
class ThreadsReplacementTest {
    private static final int WORLD = 4;
    private static final int VICTIM = 3;
    private static final int SPARE = WORLD;
    private static final int STEPS = 6;
    private static final int COUNT = 2048;
    /** The identity (for its inputs) of the replacement: not an original rank's. */
    private static final long REPLACEMENT = 100;
    private static final Duration WATCHDOG = Duration.ofSeconds(3);

    enum Fault { THROWS, INTERRUPTED, HANGS }

    /** One round: {@code victim} of {@code world} goes by {@code fault} at {@code step}. */
    private record Plan(int world, int victim, Fault fault, int step, long seed, int replacementStep,
                        Fault replacementFault) {
        Plan(int world, int victim, Fault fault, int step, long seed) {
            this(world, victim, fault, step, seed, -1, null);
        }

        @Override
        public String toString() {
            return fault + " of rank " + victim + " of " + world + " at step " + step + ", seed " + seed
                    + (replacementStep < 0 ? "" : ", the replacement " + replacementFault + " at step " + replacementStep);
        }
    }

    @AfterEach
    void clearPathSetting() {
        System.clearProperty("jnccl.grow.path");
    }

    /**
     * What each rank saw, by identity: the members at the end, the step it started from, and the
     * world size of each step it checked.
     */
    private record Seen(List<Long> members, long from, List<Integer> worlds) {
        /** {@return how many steps this rank checked (a step redone after a loss counts once: its last world)} */
        long checked() {
            return worlds.stream().filter(java.util.Objects::nonNull).count();
        }

        /** {@return the worlds of the steps it checked, in step order} */
        List<Integer> checkedWorlds() {
            return worlds.stream().filter(java.util.Objects::nonNull).toList();
        }
    }

    @ParameterizedTest
    @EnumSource(Fault.class)
    void theSurvivorsGrowBackWithAReplacementAndEveryStepIsChecked(Fault fault) throws Exception {
        assumeTrue(Cuda.deviceCount() > WORLD, "needs a spare device besides one per rank (" + Cuda.deviceCount()
                + " devices)");
        long seed = Packs.newSeed();
        Plan plan = new Plan(WORLD, VICTIM, fault, new SplittableRandom(seed).nextInt(STEPS), seed);
        ThreadsOptions options = ThreadsOptions.defaults().withPinCpus(false).withContinueWithoutFailedRanks(2)
                .withReplacementDevices(SPARE);
        if (fault == Fault.HANGS) {
            options = options.withCommunicator(CommunicatorOptions.defaults().withWatchdog(WATCHDOG));
        }
        runAndCheck(plan, options, SPARE);
    }

    /**
     * World 2 -> 1 -> 2 by each path of the grow: rank 1 throws, rank 0 alone recovers and grows back
     * with a replacement. On the emulation the spare is device 2; in the GPU machine's multi-rank
     * suite ({@link Packs#placed}: both ranks on the one GPU) the spare is that GPU too.
     */
    @ParameterizedTest
    @ValueSource(strings = {"auto", "nccl", "reinit"})
    void aPairGrowsBackAfterALossByEitherPath(String path) throws Exception {
        System.setProperty("jnccl.grow.path", path);
        long seed = Packs.newSeed();
        Plan plan = new Plan(2, 1, Fault.THROWS, new SplittableRandom(seed).nextInt(STEPS), seed);
        ThreadsOptions placed = Packs.placed(2, ThreadsOptions.defaults().withPinCpus(false));
        int spare = placed.devices().isEmpty() ? Math.min(2, Cuda.deviceCount() - 1) : placed.devices().getFirst();
        runAndCheck(plan, placed.withContinueWithoutFailedRanks(1).withReplacementDevices(spare), spare);
    }

    /**
     * The only spare is used by the first loss; when the replacement is lost in turn (it throws, or
     * it hangs and the survivors' watchdog names it), the survivors go on at 3 ranks (no spare left):
     * worlds 4, then 4 with the replacement, then 3, every step checked. The pack reports the lost
     * replacement apart from the launch's lost rank.
     */
    @ParameterizedTest
    @EnumSource(value = Fault.class, names = {"THROWS", "HANGS"})
    void aLostReplacementIsNotReplacedOnceTheSparesAreUsed(Fault replacementFault) throws Exception {
        assumeTrue(Cuda.deviceCount() > WORLD, "needs a spare device besides one per rank (" + Cuda.deviceCount()
                + " devices)");
        long seed = Packs.newSeed();
        SplittableRandom random = new SplittableRandom(seed);
        int first = random.nextInt(STEPS - 2);
        Plan plan = new Plan(WORLD, VICTIM, Fault.THROWS, first, seed, first + 1 + random.nextInt(STEPS - first - 1),
                replacementFault);
        ThreadsOptions options = ThreadsOptions.defaults().withPinCpus(false).withContinueWithoutFailedRanks(2)
                .withReplacementDevices(SPARE);
        if (replacementFault == Fault.HANGS) {
            options = options.withCommunicator(CommunicatorOptions.defaults().withWatchdog(WATCHDOG));
        }
        Map<Long, Seen> seen = new ConcurrentHashMap<>();
        try (ThreadsPack pack = ThreadsCommunicators.launch(WORLD, options, comm -> rank(comm, plan, seen))) {
            pack.join();
            assertEquals(Set.of(VICTIM), pack.lostRanks().keySet(), plan::toString);
            assertEquals(List.of(SPARE), pack.replacementDevices(), plan + ": one spare, used once");
            assertEquals(Set.of(0), pack.lostReplacements().keySet(), plan + ": the replacement on the spare");
            String why = pack.lostReplacements().get(0).getMessage();
            if (replacementFault == Fault.THROWS) {
                assertEquals("injected failure of the replacement at step " + plan.replacementStep(), why, plan::toString);
            } else {
                assertTrue(why.startsWith("replacement rank 3 hung and was interrupted: ") && why.contains("never reached"),
                        plan + ": " + why);
            }
            assertFalse(pack.hasException(), plan::toString);
        }
        assertEquals(Set.of(0L, 1L, 2L), seen.keySet(), plan + ": the replacement threw");
        for (long identity : List.of(0L, 1L, 2L)) {
            Seen s = seen.get(identity);
            assertEquals(List.of(0L, 1L, 2L), s.members(), plan + ": members at the end on " + identity);
            assertEquals(STEPS, s.checked(), plan + ": steps checked on " + identity);
            int shrunk = s.worlds().indexOf(3);
            assertTrue(shrunk >= plan.replacementStep() - 1 && shrunk <= plan.replacementStep(), plan + ": " + s);
            assertTrue(s.worlds().subList(0, shrunk).stream().allMatch(w -> w == WORLD), plan + ": " + s);
            assertTrue(s.worlds().subList(shrunk, STEPS).stream().allMatch(w -> w == 3), plan + ": " + s);
        }
        Packs.assertNoPackThreads();
    }

    /** Runs {@code plan}; checks the loss, the replacement, the members and every rank's steps. */
    private static void runAndCheck(Plan plan, ThreadsOptions options, int spare) {
        Map<Long, Seen> seen = new ConcurrentHashMap<>();
        try (ThreadsPack pack = ThreadsCommunicators.launch(plan.world(), options, comm -> rank(comm, plan, seen))) {
            pack.join();
            assertEquals(Set.of(plan.victim()), pack.lostRanks().keySet(), plan::toString);
            assertEquals(List.of(spare), pack.replacementDevices(), plan::toString);
            assertEquals(Map.of(), pack.lostReplacements(), plan + ": the replacement was not lost");
            assertFalse(pack.hasException(), plan::toString);
        }
        List<Long> members = new java.util.ArrayList<>(LongStream.range(0, plan.world())
                .filter(r -> r != plan.victim()).boxed().toList());
        List<Long> survivors = List.copyOf(members);
        members.add(REPLACEMENT);
        assertEquals(Set.copyOf(members), seen.keySet(), plan::toString);
        for (long identity : survivors) {
            assertEquals(members, seen.get(identity).members(), plan + ": members at the end on " + identity);
            assertEquals(STEPS, seen.get(identity).checked(), plan + ": steps checked on " + identity);
        }
        Seen replaced = seen.get(REPLACEMENT);
        assertEquals(members, replaced.members(), plan::toString);
        // From the victim's step; or the step before, which the victim finished but a survivor saw fail
        // in its wait; or (interrupted) the next, when the victim's all-reduce of it went out first.
        long from = replaced.from();
        assertTrue(from == plan.step() || from == plan.step() - 1 || plan.fault() == Fault.INTERRUPTED
                && from == plan.step() + 1, plan + ": the replacement started from step " + from);
        assertEquals(STEPS - replaced.from(), replaced.checked(), plan + ": the replacement's steps");
        seen.values().forEach(s -> assertTrue(s.checkedWorlds().stream().allMatch(w -> w == plan.world()),
                plan + ": " + s));
        Packs.assertNoPackThreads();
    }

    @Test
    void replacementDevicesAreCheckedAtLaunch() {
        IllegalArgumentException off = assertThrows(IllegalArgumentException.class, () -> ThreadsCommunicators.launch(
                2, ThreadsOptions.defaults().withDevices(0, 0).withReplacementDevices(0), comm -> {}));
        assertTrue(off.getMessage().contains("need ThreadsOptions.withContinueWithoutFailedRanks"), off.getMessage());
        int visible = Cuda.deviceCount();
        IllegalArgumentException invisible = assertThrows(IllegalArgumentException.class,
                () -> ThreadsCommunicators.launch(2, ThreadsOptions.defaults().withDevices(0, 0) // one GPU may be all
                        .withContinueWithoutFailedRanks(1).withReplacementDevices(visible), comm -> {}));
        assertTrue(invisible.getMessage().contains("replacement device " + visible), invisible.getMessage());
        assertThrows(IllegalArgumentException.class, () -> ThreadsOptions.defaults().withReplacementDevices(-1));
        assertFalse(ThreadsCommunicators.isReplacement(), "the test's thread is no replacement");
        Packs.assertNoPackThreads();
    }

    /**
     * One rank: a replacement first joins the survivors' agreement; then every step all-reduces this
     * step's inputs over the members, checked, and a barrier ends the work. After a loss the
     * survivors recover and agree, with the replacement, on the members (by identity, in rank order)
     * and the step to go on from.
     */
    private static void rank(Communicator first, Plan plan, Map<Long, Seen> seen) {
        boolean replacement = ThreadsCommunicators.isReplacement();
        long identity = replacement ? REPLACEMENT : first.rank();
        Communicator comm = first;
        Integer[] worlds = new Integer[STEPS]; // by step: a step redone after a loss keeps its last world
        long step = 0;
        List<Long> members = LongStream.range(0, plan.world()).boxed().toList();
        if (replacement) {
            members = members(comm, identity);
            step = agreedStep(comm, Long.MAX_VALUE);
        }
        long from = step;
        while (step <= STEPS) {
            if (identity == plan.victim() && step == plan.step()) {
                fail(plan.fault(), plan.victim());
            }
            if (identity == REPLACEMENT && step == plan.replacementStep()) {
                if (plan.replacementFault() == Fault.HANGS) {
                    fail(Fault.HANGS, plan.world() - 1); // the survivors' watchdog names it; the pack interrupts it
                }
                throw new IllegalStateException("injected failure of the replacement at step " + step);
            }
            try {
                if (step < STEPS) {
                    allReduceChecked(comm, plan.seed(), members, (int) step);
                    worlds[(int) step] = comm.worldSize();
                } else {
                    comm.barrier();
                }
                step++;
            } catch (RankLostException e) {
                comm = e.recover();
                members = members(comm, identity);
                step = agreedStep(comm, step);
            }
        }
        seen.put(identity, new Seen(members, from, Arrays.asList(worlds)));
    }

    private static List<Long> members(Communicator comm, long identity) {
        return Arrays.stream(comm.allGatherLongsHost(identity)).boxed().toList();
    }

    /** The earliest step a member has not finished (a replacement passes MAX_VALUE: it has none). */
    private static long agreedStep(Communicator comm, long step) {
        return Arrays.stream(comm.allGatherLongsHost(step)).min().orElseThrow();
    }

    private static void fail(Fault fault, int victim) {
        switch (fault) {
            case THROWS -> throw new IllegalStateException("injected failure of rank " + victim);
            case INTERRUPTED -> Thread.currentThread().interrupt(); // its next wait ends with it
            case HANGS -> {
                try {
                    Thread.sleep(Duration.ofSeconds(60)); // the survivors' watchdog names it, the pack interrupts it
                } catch (InterruptedException e) {
                    throw new IllegalStateException("hung rank interrupted", e);
                }
                throw new AssertionError("the hung rank was not interrupted within 60 s");
            }
        }
    }

    private static void allReduceChecked(Communicator comm, long seed, List<Long> members, int step) {
        try (Arena arena = Arena.ofConfined(); DeviceMemory memory = DeviceMemory.allocate(DType.INT32, COUNT)) {
            MemorySegment host = arena.allocate(ValueLayout.JAVA_INT, COUNT);
            MemorySegment.copy(input(seed, members.get(comm.rank()), step), 0, host, ValueLayout.JAVA_INT, 0, COUNT);
            memory.copyFromHost(host);
            comm.allReduce(memory.tensor(DType.INT32), ReduceOp.SUM, comm.stream());
            comm.synchronize();
            memory.copyToHost(host);
            int[] expected = new int[COUNT];
            for (long member : members) {
                int[] theirs = input(seed, member, step);
                for (int i = 0; i < COUNT; i++) {
                    expected[i] += theirs[i];
                }
            }
            assertArrayEquals(expected, host.toArray(ValueLayout.JAVA_INT), "step " + step + " on rank " + comm.rank()
                    + " of members " + members);
        }
    }

    /** The input of the member {@code identity} at {@code step}: random, never all zero. */
    private static int[] input(long seed, long identity, int step) {
        return new SplittableRandom(seed * 31 + identity * 1009L + step).ints(COUNT, -1_000_000, 1_000_000).toArray();
    }
}
