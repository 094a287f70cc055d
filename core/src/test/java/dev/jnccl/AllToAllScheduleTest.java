package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

/**
 * The destructive all-to-all's schedule, simulated for every rank of worlds 1..8: sends and
 * receives of one round run concurrently (one NCCL group), rounds run one after the other.
 */
class AllToAllScheduleTest {

    /** Contents of a slot: the shard that rank {@code owner} had for rank {@code destination}. */
    record Shard(int owner, int destination) {}

    @ParameterizedTest
    @ValueSource(ints = {1, 2, 3, 4, 5, 6, 7, 8})
    void everyShardArrivesWhereTheDocumentationSays(int world) {
        Shard[][] slots = new Shard[world][world];
        for (int r = 0; r < world; r++) {
            for (int j = 0; j < world; j++) {
                slots[r][j] = new Shard(r, j);
            }
        }
        for (int round = 1; round < world; round++) {
            // All sends of the round read the state before any receive of the round writes.
            Shard[] sent = new Shard[world];
            for (int r = 0; r < world; r++) {
                AllToAllSchedule.Round mine = AllToAllSchedule.rounds(r, world).get(round - 1);
                assertEquals(round, mine.round());
                sent[r] = slots[r][mine.sendSlot()];
                assertEquals(new Shard(r, mine.sendPeer()), sent[r],
                        "rank " + r + " round " + round + " sends a slot that was already overwritten");
            }
            for (int r = 0; r < world; r++) {
                AllToAllSchedule.Round mine = AllToAllSchedule.rounds(r, world).get(round - 1);
                AllToAllSchedule.Round theirs = AllToAllSchedule.rounds(mine.recvPeer(), world).get(round - 1);
                assertEquals(r, theirs.sendPeer(), "round " + round + ": rank " + mine.recvPeer()
                        + " does not send to rank " + r + " which receives from it");
                slots[r][mine.recvSlot()] = sent[mine.recvPeer()];
            }
        }
        for (int r = 0; r < world; r++) {
            for (int slot = 0; slot < world; slot++) {
                int source = AllToAllSchedule.sourceOfSlot(r, world, slot);
                if (source < 0) {
                    assertEquals(AllToAllSchedule.staleSlot(r, world), slot);
                    continue;
                }
                assertEquals(new Shard(source, r), slots[r][slot], "world " + world + " rank " + r + " slot " + slot);
            }
            Set<Integer> sources = new HashSet<>();
            for (int slot = 0; slot < world; slot++) {
                sources.add(AllToAllSchedule.sourceOfSlot(r, world, slot));
            }
            // Every peer's shard is somewhere; with world > 1 the own shard is gone and one slot is stale.
            for (int peer = 0; peer < world; peer++) {
                if (peer != r || world == 1) {
                    assertTrue(sources.contains(peer), "world " + world + " rank " + r + " lacks peer " + peer);
                }
            }
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {2, 3, 4, 5, 6, 7, 8})
    void aReceiveNeverWritesASlotThatIsStillToBeSentOrBeingSent(int world) {
        for (int r = 0; r < world; r++) {
            List<AllToAllSchedule.Round> rounds = AllToAllSchedule.rounds(r, world);
            Set<Integer> alreadySent = new HashSet<>();
            alreadySent.add(r); // the own shard is given up by the destructive variant
            for (AllToAllSchedule.Round round : rounds) {
                assertNotEquals(round.sendSlot(), round.recvSlot(), "same slot sent and received in one group");
                assertTrue(alreadySent.contains(round.recvSlot()), "world " + world + " rank " + r + " round "
                        + round.round() + " receives into slot " + round.recvSlot() + " before sending it");
                alreadySent.add(round.sendSlot());
            }
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {3, 4, 8})
    void oneGroupForAllRoundsWouldBeUnsafe(int world) {
        // The C++ original posted every round in one NCCL group. With no order between peers, a
        // receive may then land in a slot that another round is still sending: show such a pair.
        List<AllToAllSchedule.Round> rounds = AllToAllSchedule.rounds(0, world);
        List<Integer> sendSlots = new ArrayList<>();
        rounds.forEach(round -> sendSlots.add(round.sendSlot()));
        boolean hazard = rounds.stream().anyMatch(round -> sendSlots.contains(round.recvSlot()));
        assertTrue(hazard, "expected a receive slot that is also a send slot of the same group");
    }

    @Test
    void worldOneMovesNothing() {
        assertEquals(List.of(), AllToAllSchedule.rounds(0, 1));
        assertEquals(0, AllToAllSchedule.sourceOfSlot(0, 1, 0));
        assertEquals(-1, AllToAllSchedule.staleSlot(0, 1));
    }

    @Test
    void documentsTheLayoutOfWorldFour() {
        // Rank 1 of 4: slot 1 <- rank 0, slot 2 <- rank 3, slot 3 <- rank 2, slot 0 stale.
        assertEquals(0, AllToAllSchedule.sourceOfSlot(1, 4, 1));
        assertEquals(3, AllToAllSchedule.sourceOfSlot(1, 4, 2));
        assertEquals(2, AllToAllSchedule.sourceOfSlot(1, 4, 3));
        assertEquals(-1, AllToAllSchedule.sourceOfSlot(1, 4, 0));
        assertEquals(0, AllToAllSchedule.staleSlot(1, 4));
        assertEquals(new AllToAllSchedule.Round(1, 2, 2, 1, 0), AllToAllSchedule.rounds(1, 4).get(0));
    }

    @Test
    void rejectsBadArguments() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> AllToAllSchedule.rounds(4, 4));
        assertEquals("AllToAllSchedule: rank 4 out of range [0, 4)", e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> AllToAllSchedule.rounds(0, 0));
        assertThrows(IllegalArgumentException.class, () -> AllToAllSchedule.sourceOfSlot(0, 4, 4));
    }
}
