package dev.jnccl.spi;

import java.util.Objects;

/**
 * What a launcher supplies to make one rank's communicator: how the ranks meet on the host and how
 * the commands move.
 *
 * @param host      the host side (barrier, host gathers, splits, failure propagation)
 * @param transport the transport ({@link Transport#NCCL} for NCCL only)
 */
public record RankParts(HostSide host, Transport transport) {
    /** Checks that both parts are given. */
    public RankParts {
        Objects.requireNonNull(host, "RankParts: host is null");
        Objects.requireNonNull(transport, "RankParts: transport is null");
    }
}
