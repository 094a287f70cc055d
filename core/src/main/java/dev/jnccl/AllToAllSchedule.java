package dev.jnccl;

import java.util.ArrayList;
import java.util.List;

/**
 * The schedule of the destructive all-to-all, and where each shard ends up.
 *
 * <p>Before: the tensor of rank {@code r} (world {@code n}) holds {@code n} equal slots; slot
 * {@code j} is the shard meant for rank {@code j}. The operation has {@code n - 1} rounds; in round
 * {@code i} (1-based) rank {@code r} sends slot {@code (r + i) mod n} to rank {@code (r + i) mod n}
 * and receives from rank {@code (r - i) mod n} into slot {@code (r + i - 1) mod n}, the slot it sent
 * in the previous round (round 1 receives into slot {@code r}, the rank's own shard, which is
 * overwritten — that is what "destructive" means).
 *
 * <p>After: for {@code i = 1 .. n-1}, slot {@code (r + i - 1) mod n} holds the shard that rank
 * {@code (r - i) mod n} had for {@code r}. Slot {@code (r - 1) mod n} is <b>stale</b>: it still
 * holds what {@code r} sent to rank {@code (r - 1) mod n} in the last round. With {@code n = 1}
 * nothing moves.
 *
 * <p>Each round runs as its own NCCL group, after the previous one on the same stream. NCCL orders
 * point-to-point operations only per peer, so putting all rounds in one group (as the C++ original
 * did) let a receive overwrite a slot that another peer was still reading for world sizes of 4 and
 * more. Here a receive only ever writes a slot whose send finished in an earlier group.
 */
public final class AllToAllSchedule {

    /**
     * One round of one rank.
     *
     * @param round    1-based round number
     * @param sendSlot slot sent in this round
     * @param sendPeer rank it is sent to
     * @param recvSlot slot received into in this round
     * @param recvPeer rank it is received from
     */
    public record Round(int round, int sendSlot, int sendPeer, int recvSlot, int recvPeer) {}

    private AllToAllSchedule() {}

    /**
     * The rounds of {@code rank} in a world of {@code worldSize}, in execution order.
     *
     * @param rank the rank whose rounds are listed
     * @param worldSize the number of ranks
     * @return the rounds, in the order they run
     */
    public static List<Round> rounds(int rank, int worldSize) {
        check(rank, worldSize);
        List<Round> rounds = new ArrayList<>(worldSize - 1);
        for (int i = 1; i < worldSize; i++) {
            int to = Math.floorMod(rank + i, worldSize);
            int from = Math.floorMod(rank - i, worldSize);
            rounds.add(new Round(i, to, to, Math.floorMod(rank + i - 1, worldSize), from));
        }
        return rounds;
    }

    /**
     * The rank whose shard for {@code rank} sits in {@code slot} afterwards, or -1 for the stale
     * slot (with world size 1, slot 0 keeps the rank's own shard: 0).
     *
     * @param rank the rank whose tensor is asked about
     * @param worldSize the number of ranks
     * @param slot a slot index in {@code [0, worldSize)}
     * @return the source rank of the slot's data, or -1 for the stale slot
     */
    public static int sourceOfSlot(int rank, int worldSize, int slot) {
        check(rank, worldSize);
        if (slot < 0 || slot >= worldSize) {
            throw new IllegalArgumentException("sourceOfSlot: slot " + slot + " out of range [0, " + worldSize + ")");
        }
        if (worldSize == 1) {
            return rank;
        }
        int i = Math.floorMod(slot - rank, worldSize) + 1; // slot = r + i - 1
        return i == worldSize ? -1 : Math.floorMod(rank - i, worldSize);
    }

    /**
     * The slot that is stale afterwards, or -1 with world size 1.
     *
     * @param rank the rank whose tensor is asked about
     * @param worldSize the number of ranks
     * @return the index of the stale slot, or -1
     */
    public static int staleSlot(int rank, int worldSize) {
        check(rank, worldSize);
        return worldSize == 1 ? -1 : Math.floorMod(rank - 1, worldSize);
    }

    private static void check(int rank, int worldSize) {
        if (worldSize < 1) {
            throw new IllegalArgumentException("AllToAllSchedule: world size " + worldSize + " must be positive");
        }
        if (rank < 0 || rank >= worldSize) {
            throw new IllegalArgumentException("AllToAllSchedule: rank " + rank + " out of range [0, " + worldSize + ")");
        }
    }
}
