package dev.jnccl.spi;

import java.util.Objects;

/**
 * What a launcher supplies to make one rank's communicator: how the ranks meet on the host, how the
 * commands move, and, optionally, where the launcher joins in at the points of the communicator's
 * life and how a failure reaches the other ranks. One object may serve as several parts (threads
 * and MPI modes pass their host side as its events and failures too).
 *
 * @param host      the host side (barrier, host gathers, the parts of a split)
 * @param transport the transport ({@link Transport#NCCL} for NCCL only)
 * @param events    what the launcher does when the communicator is attached, paced, split and closed
 *                  ({@link RankEvents#NONE} for nothing)
 * @param failures  what the launcher knows of failed peers and does on an abort ({@link Failures#NONE}
 *                  for a launcher with no side channel between the ranks)
 */
public record RankParts(HostSide host, Transport transport, RankEvents events, Failures failures) {
    /** Checks that every part is given. */
    public RankParts {
        Objects.requireNonNull(host, "RankParts: host is null");
        Objects.requireNonNull(transport, "RankParts: transport is null");
        Objects.requireNonNull(events, "RankParts: events is null");
        Objects.requireNonNull(failures, "RankParts: failures is null");
    }

    /**
     * The parts of a launcher that only meets on the host: no events, no failure handling of its own.
     *
     * @param host      the host side
     * @param transport the transport
     */
    public RankParts(HostSide host, Transport transport) {
        this(host, transport, RankEvents.NONE, Failures.NONE);
    }
}
