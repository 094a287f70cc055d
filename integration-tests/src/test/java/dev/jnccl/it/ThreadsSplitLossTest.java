package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DType;
import dev.jnccl.RankLostException;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import dev.jnccl.threads.ThreadsPack;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.stream.IntStream;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * A rank lost while the pack's bodies also use communicators split from the pack's
 * ({@link Communicator#split}): every step all-reduces in the rank's child, then in the parent,
 * random integers checked element by element. What must hold (docs/elastic.md, "Split communicators"):
 * the child that held the lost rank throws {@link RankLostException} naming it in the child's
 * numbering, and its survivors recover it; a child whose members all survived never throws and goes
 * on as it was (the same communicator to the end); the parent throws RankLostException and recovers
 * after, or before, its children; the recovered parent splits again. Seeded victim and step.
 */
@Timeout(120)
class ThreadsSplitLossTest {
    private static final int STEPS = 5;
    private static final Duration HANG_WATCHDOG = Duration.ofSeconds(3);

    /** How the pack is split: two halves of a 4-rank pack, or three pairs of a 6-rank pack (color rank / 2 both). */
    enum Layout {
        HALVES(4), PAIRS(6);

        final int world;

        Layout(int world) {
            this.world = world;
        }
    }

    /** How the victim goes: it throws, is interrupted, or never calls again (the watchdogs name it). */
    enum Fault { THROWS, INTERRUPTED, NEVER_CALLS }

    record Round(long seed, Layout layout, Fault fault, int victim, int step) {
        static Round plan(long seed, Layout layout, Fault fault) {
            SplittableRandom random = new SplittableRandom(seed);
            return new Round(seed, layout, fault, random.nextInt(layout.world), random.nextInt(STEPS));
        }

        int color(int rank) {
            return rank / 2;
        }

        @Override
        public String toString() {
            return "seed " + seed + " (-Djnccl.it.seed=" + seed + "): " + layout + ", rank " + victim + " " + fault
                    + " at step " + step;
        }
    }

    /** What one survivor saw of its child: the child's exceptions' lost ranks, and whether it kept its first child. */
    record ChildSeen(List<List<Integer>> childLosses, boolean sameChild, int childWorld, List<Integer> parentMembers) {}

    @ParameterizedTest
    @EnumSource(Fault.class)
    void aLostRanksChildRecoversTheWholeChildrenGoOnAndTheParentRecovers(Fault fault) {
        assumeFalse(Packs.SHARE_DEVICES, "runs in the default execution (one device per rank)");
        long base = Packs.newSeed();
        for (Layout layout : Layout.values()) {
            Packs.assumeDevices(layout.world);
            runRound(Round.plan(base + layout.ordinal(), layout, fault));
        }
    }

    private static void runRound(Round round) {
        System.out.println(round);
        ThreadsOptions options = ThreadsOptions.defaults().withContinueWithoutFailedRanks(2);
        if (round.fault() == Fault.NEVER_CALLS) {
            options = options.withCommunicator(CommunicatorOptions.defaults().withWatchdog(HANG_WATCHDOG));
        }
        ChildSeen[] seen = new ChildSeen[round.layout().world];
        try (ThreadsPack pack = ThreadsCommunicators.launch(round.layout().world, options, comm -> rank(comm, round, seen))) {
            pack.join();
            assertEquals(Set.of(round.victim()), pack.lostRanks().keySet(), round::toString);
            assertFalse(pack.hasException(), round::toString);
        }
        Packs.assertNoPackThreads();
        List<Integer> survivors = IntStream.range(0, round.layout().world).filter(r -> r != round.victim()).boxed().toList();
        for (int rank : survivors) {
            ChildSeen mine = seen[rank];
            assertNotNull(mine, () -> round + ": rank " + rank + " did not finish");
            assertEquals(survivors, mine.parentMembers(), () -> round + ": parent members on rank " + rank);
            if (round.color(rank) == round.color(round.victim())) {
                // The victim's pair: its child lost the victim, named in the child's numbering (the victim's key).
                assertEquals(List.of(List.of(round.victim() % 2)), mine.childLosses(), () -> round + ": rank " + rank);
                assertEquals(1, mine.childWorld(), () -> round + ": rank " + rank);
            } else {
                assertEquals(List.of(), mine.childLosses(), () -> round + ": whole child on rank " + rank + " threw");
                assertTrue(mine.sameChild(), () -> round + ": rank " + rank);
                assertEquals(2, mine.childWorld(), () -> round + ": rank " + rank);
            }
        }
    }

    /**
     * One rank: per step a checked all-reduce in its child, then one in the parent. A RankLostException
     * of the child is recovered at once (the victim's partner is then alone in its child); one of the
     * parent is recovered, and the survivors go on from the earliest step any of them has not finished.
     * At the end the recovered parent splits again and all-reduces, checked, in its new children.
     */
    private static void rank(Communicator first, Round round, ChildSeen[] seen) {
        int original = first.rank();
        List<Integer> members = new ArrayList<>(IntStream.range(0, round.layout().world).boxed().toList());
        Communicator parent = first;
        Communicator firstChild = first.split(round.color(original), original).orElseThrow();
        Communicator child = firstChild;
        List<Integer> childMembers = new ArrayList<>(List.of(original - original % 2, original - original % 2 + 1));
        List<List<Integer>> childLosses = new ArrayList<>();
        int step = 0;
        while (step < STEPS) {
            if (original == round.victim() && step == round.step()) {
                fail(round);
            }
            try {
                child = childStep(child, round, childMembers, step, childLosses);
                allReduceChecked(parent, round, members, step, "parent");
                step++;
            } catch (RankLostException e) {
                e.lostRanks().reversed().forEach(lost -> members.remove((int) lost));
                parent = e.recover();
                assertEquals(members.indexOf(original), parent.rank(), round::toString);
                step = (int) Arrays.stream(parent.allGatherLongsHost(step)).min().orElseThrow();
            }
        }
        // The recovered parent splits again (the survivors in two groups by their new rank) and all-reduces there.
        int half = parent.rank() % 2;
        try (Communicator again = parent.split(half, parent.rank()).orElseThrow()) {
            List<Integer> againMembers = IntStream.range(0, members.size()).filter(r -> r % 2 == half)
                    .mapToObj(members::get).toList();
            allReduceChecked(again, round, againMembers, STEPS, "split of the recovered parent");
        }
        seen[original] = new ChildSeen(List.copyOf(childLosses), child == firstChild, child.worldSize(),
                List.copyOf(members));
    }

    /** This step's child all-reduce; a RankLostException of the child is recovered and the step redone there. */
    private static Communicator childStep(Communicator child, Round round, List<Integer> childMembers, int step,
                                          List<List<Integer>> childLosses) {
        try {
            allReduceChecked(child, round, childMembers, step, "child");
            return child;
        } catch (RankLostException e) {
            childLosses.add(e.lostRanks());
            e.lostRanks().reversed().forEach(lost -> childMembers.remove((int) lost));
            Communicator recovered = e.recover();
            assertSame(recovered, e.recover(), "recover is idempotent");
            assertEquals(childMembers.size(), recovered.worldSize(), round::toString);
            allReduceChecked(recovered, round, childMembers, step, "child");
            return recovered;
        }
    }

    private static void fail(Round round) {
        switch (round.fault()) {
            case THROWS -> throw new IllegalStateException("injected: " + round);
            case INTERRUPTED -> Thread.currentThread().interrupt();
            case NEVER_CALLS -> {
                try {
                    Thread.sleep(Duration.ofSeconds(60));
                } catch (InterruptedException e) {
                    throw new IllegalStateException("hung rank interrupted: " + round, e);
                }
                throw new AssertionError(round + ": the hung rank was not interrupted within 60 s");
            }
        }
    }

    /** An all-reduce of each member's input for {@code step} and {@code what}, checked against their sum. */
    private static void allReduceChecked(Communicator comm, Round round, List<Integer> members, int step, String what) {
        int count = 1 + new SplittableRandom(round.seed() * 7 + step).nextInt(2048);
        try (Arena arena = Arena.ofConfined();
             DeviceMemory memory = DeviceMemory.allocate(DType.INT32, count)) {
            MemorySegment host = arena.allocateFrom(ValueLayout.JAVA_INT,
                    input(round, members.get(comm.rank()), step, what, count));
            memory.copyFromHost(host);
            comm.allReduce(memory.tensor(DType.INT32), ReduceOp.SUM, comm.stream());
            comm.synchronize();
            memory.copyToHost(host);
            int[] expected = new int[count];
            for (int member : members) {
                int[] theirs = input(round, member, step, what, count);
                for (int i = 0; i < count; i++) {
                    expected[i] += theirs[i];
                }
            }
            assertArrayEquals(expected, host.toArray(ValueLayout.JAVA_INT), () -> round + ": " + what + " step " + step
                    + " on rank " + comm.rank() + " of members " + members);
        }
    }

    private static int[] input(Round round, int rank, int step, String what, int count) {
        return new SplittableRandom(round.seed() * 31 + rank * 1009L + step * 7919L + what.hashCode())
                .ints(count, -1_000_000, 1_000_000).toArray();
    }
}
