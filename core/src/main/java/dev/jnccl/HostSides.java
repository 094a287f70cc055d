package dev.jnccl;

import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.Membership;
import dev.jnccl.spi.RankParts;
import dev.jnccl.spi.Transport;
import java.util.List;

/** The host side core itself supplies for one rank alone ({@link dev.jnccl.spi.NcclHostSide} serves {@link Communicator#initRank}). */
final class HostSides {
    private HostSides() {}

    /** World size 1: the host-side collectives are the identity; a split is one rank alone again. */
    static final HostSide SINGLE = new HostSide() {
        @Override
        public void barrier(long timeoutNanos) {}

        @Override
        public List<byte[]> gather(byte[] local, int root, long timeoutNanos) {
            return List.of(local.clone());
        }

        @Override
        public List<byte[]> allGather(byte[] local, long timeoutNanos) {
            return List.of(local.clone());
        }

        @Override
        public RankParts split(Membership membership) {
            return new RankParts(this, Transport.NCCL);
        }
    };
}
