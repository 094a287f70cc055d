package dev.jnccl;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The split bookkeeping of one {@link Communicator}: what its ranks exchange to split, the members
 * that follow from it, and the live communicators split from it, which are closed (or aborted)
 * before it.
 */
final class Children {
    /** The parent's lifecycle lock: no child is added once the parent has stopped being open. */
    private final Object lock;
    /** The live children, each with its members' ranks in the parent. */
    private final Map<Communicator, List<Integer>> live = new LinkedHashMap<>();

    Children(Object lock) {
        this.lock = lock;
    }

    /** {@return what this rank contributes to the split's host all-gather} */
    static byte[] colorAndKey(int color, int key) {
        return ByteBuffer.allocate(2 * Integer.BYTES).putInt(color).putInt(key).array();
    }

    /**
     * The members of the new communicator of {@code color}: the ranks that passed it, in NCCL's
     * order (by key, then by rank in the parent).
     *
     * @param all every rank's {@link #colorAndKey}, in rank order
     * @param color this rank's color; negative: no members
     * @return the members' ranks in the parent, in the new communicator's rank order
     */
    static List<Integer> members(List<byte[]> all, int color) {
        List<int[]> mates = new ArrayList<>(); // {key, rank} of the ranks with this color
        for (int r = 0; r < all.size(); r++) {
            ByteBuffer entry = ByteBuffer.wrap(all.get(r));
            int theirColor = entry.getInt();
            int theirKey = entry.getInt();
            if (color >= 0 && theirColor == color) {
                mates.add(new int[] {theirKey, r});
            }
        }
        mates.sort((a, b) -> a[0] != b[0] ? Integer.compare(a[0], b[0]) : Integer.compare(a[1], b[1]));
        return mates.stream().map(m -> m[1]).toList();
    }

    /** Adds a child of {@code members} (ranks in the parent); the caller holds the lock and has seen the parent open. */
    void add(Communicator child, List<Integer> members) {
        synchronized (lock) {
            live.put(child, List.copyOf(members));
        }
    }

    void remove(Communicator child) {
        synchronized (lock) {
            live.remove(child);
        }
    }

    /** {@return the live children now (closing one removes it meanwhile)} */
    List<Communicator> live() {
        synchronized (lock) {
            return List.copyOf(live.keySet());
        }
    }

    /**
     * The live children that the parent's abort or retirement reaches: all of them when {@code lost}
     * is empty; else those with a lost member. A child whose members all survived is whole: its
     * collectives never wait for a lost rank, so it goes on (NCCL's split communicators are
     * independent of their parent too) until the parent is closed.
     *
     * @param lost ranks of the parent that were lost (or excluded by its shrink), or empty
     */
    List<Communicator> reachedBy(List<Integer> lost) {
        synchronized (lock) {
            return live.entrySet().stream().filter(e -> lost.isEmpty() || e.getValue().stream().anyMatch(lost::contains))
                    .map(Map.Entry::getKey).toList();
        }
    }
}
