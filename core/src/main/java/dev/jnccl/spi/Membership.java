package dev.jnccl.spi;

import dev.jnccl.Communicator;
import java.util.List;
import java.util.Objects;

/**
 * One rank's place in a communicator made by {@link Communicator#split} or {@link Communicator#shrink}:
 * what the host side needs to build the new communicator's host side among the members only. A
 * shrink's membership has color 0, this rank's old rank as key, and the survivors as members.
 *
 * @param parent  the communicator that was split or shrunk
 * @param color   the color this rank passed (non-negative; 0 for a shrink)
 * @param key     the key this rank passed (a shrink: this rank in the parent)
 * @param rank    this rank in the new communicator
 * @param members the members' ranks in the parent, indexed by their rank in the new communicator
 */
public record Membership(Communicator parent, int color, int key, int rank, List<Integer> members) {
    /** Checks the values and copies the members. */
    public Membership {
        Objects.requireNonNull(parent, "Membership: parent is null");
        members = List.copyOf(members);
        if (rank < 0 || rank >= members.size()) {
            throw new IllegalArgumentException("Membership: rank " + rank + " out of range [0, " + members.size() + ")");
        }
    }

    /** {@return the number of ranks of the new communicator} */
    public int worldSize() {
        return members.size();
    }
}
