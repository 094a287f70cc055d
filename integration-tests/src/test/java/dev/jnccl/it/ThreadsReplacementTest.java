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
import java.util.stream.IntStream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * Threads mode replacing a lost rank ({@link ThreadsOptions#withReplacementDevices}): at world 4,
 * rank 3 throws, is interrupted or hangs at a seeded random step; the three survivors' {@code
 * recover()} shrinks to 3 and grows back to 4 with a replacement rank that the pack starts on the
 * spare device. Every rank, the replacement too, checks each step's all-reduce of random integers
 * element by element against the sum of the members' inputs, at world 4 before and after; the
 * members after the recovery are the survivors in their old order, then the replacement. No thread
 * of the pack is left.
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

    /**
     * What each rank saw, by identity: the members at the end, the step it started from, and the
     * world size of each step it checked.
     */
    private record Seen(List<Long> members, long from, List<Integer> worlds) {}

    @ParameterizedTest
    @EnumSource(Fault.class)
    void theSurvivorsGrowBackWithAReplacementAndEveryStepIsChecked(Fault fault) throws Exception {
        assumeTrue(Cuda.deviceCount() > WORLD, "needs a spare device besides one per rank (" + Cuda.deviceCount()
                + " devices)");
        long seed = Packs.newSeed();
        int victimStep = new SplittableRandom(seed).nextInt(STEPS);
        String round = fault + " at step " + victimStep + ", seed " + seed;
        ThreadsOptions options = ThreadsOptions.defaults().withPinCpus(false).withContinueWithoutFailedRanks(2)
                .withReplacementDevices(SPARE);
        if (fault == Fault.HANGS) {
            options = options.withCommunicator(CommunicatorOptions.defaults().withWatchdog(WATCHDOG));
        }
        Map<Long, Seen> seen = new ConcurrentHashMap<>();
        try (ThreadsPack pack = ThreadsCommunicators.launch(WORLD, options,
                comm -> rank(comm, fault, victimStep, seed, seen))) {
            pack.join();
            assertEquals(Set.of(VICTIM), pack.lostRanks().keySet(), round);
            assertEquals(List.of(SPARE), pack.replacementDevices(), round);
            assertFalse(pack.hasException(), round);
        }
        List<Long> members = List.of(0L, 1L, 2L, REPLACEMENT);
        assertEquals(Set.of(0L, 1L, 2L, REPLACEMENT), seen.keySet(), round);
        for (long identity : List.of(0L, 1L, 2L)) {
            assertEquals(members, seen.get(identity).members(), round + ": members at the end on " + identity);
            assertEquals(STEPS, seen.get(identity).worlds().size(), round + ": steps checked on " + identity);
        }
        Seen replaced = seen.get(REPLACEMENT);
        assertEquals(members, replaced.members(), round);
        // From the victim's step, or the next one when the victim's all-reduce of it went out before its interrupt.
        assertTrue(replaced.from() == victimStep || fault == Fault.INTERRUPTED && replaced.from() == victimStep + 1,
                round + ": the replacement started from step " + replaced.from());
        assertEquals(STEPS - replaced.from(), replaced.worlds().size(), round + ": the replacement's steps");
        seen.values().forEach(s -> assertTrue(s.worlds().stream().allMatch(w -> w == WORLD), round + ": " + s));
        Packs.assertNoPackThreads();
    }

    @Test
    void replacementDevicesAreCheckedAtLaunch() {
        IllegalArgumentException off = assertThrows(IllegalArgumentException.class, () -> ThreadsCommunicators.launch(
                2, ThreadsOptions.defaults().withReplacementDevices(2), comm -> {}));
        assertTrue(off.getMessage().contains("need ThreadsOptions.withContinueWithoutFailedRanks"), off.getMessage());
        int visible = Cuda.deviceCount();
        IllegalArgumentException invisible = assertThrows(IllegalArgumentException.class,
                () -> ThreadsCommunicators.launch(2, ThreadsOptions.defaults().withContinueWithoutFailedRanks(1)
                        .withReplacementDevices(visible), comm -> {}));
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
    private static void rank(Communicator first, Fault fault, int victimStep, long seed, Map<Long, Seen> seen) {
        boolean replacement = ThreadsCommunicators.isReplacement();
        long identity = replacement ? REPLACEMENT : first.rank();
        Communicator comm = first;
        List<Integer> worlds = new java.util.ArrayList<>();
        long step = 0;
        List<Long> members = IntStream.range(0, WORLD).mapToObj(r -> (long) r).toList();
        if (replacement) {
            members = members(comm, identity);
            step = agreedStep(comm, Long.MAX_VALUE);
        }
        long from = step;
        while (step <= STEPS) {
            if (identity == VICTIM && step == victimStep) {
                fail(fault);
            }
            try {
                if (step < STEPS) {
                    allReduceChecked(comm, seed, members, (int) step);
                    worlds.add(comm.worldSize());
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
        seen.put(identity, new Seen(members, from, List.copyOf(worlds)));
    }

    private static List<Long> members(Communicator comm, long identity) {
        return Arrays.stream(comm.allGatherLongsHost(identity)).boxed().toList();
    }

    /** The earliest step a member has not finished (a replacement passes MAX_VALUE: it has none). */
    private static long agreedStep(Communicator comm, long step) {
        return Arrays.stream(comm.allGatherLongsHost(step)).min().orElseThrow();
    }

    private static void fail(Fault fault) {
        switch (fault) {
            case THROWS -> throw new IllegalStateException("injected failure of rank " + VICTIM);
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
