package dev.jnccl;

import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.Membership;
import dev.jnccl.spi.RankParts;
import dev.jnccl.spi.Transport;
import java.util.List;

/** The host sides core itself supplies: one rank alone, and a rank of a world without a launcher. */
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

    /** {@link Communicator#initRank}: the ranks meet only through the unique id, so no host-side collectives. */
    static final HostSide NONE = new HostSide() {
        @Override
        public void barrier(long timeoutNanos) {
            throw unsupported("barrier");
        }

        @Override
        public List<byte[]> gather(byte[] local, int root, long timeoutNanos) {
            throw unsupported("gatherBytesHost");
        }

        @Override
        public List<byte[]> allGather(byte[] local, long timeoutNanos) {
            throw unsupported("allGatherBytesHost");
        }

        private UnsupportedOperationException unsupported(String operation) {
            return new UnsupportedOperationException(operation + ": a communicator made by Communicator.initRank has"
                    + " no host side (the ranks meet only through the unique id); use a launcher (threads, MPI)"
                    + " for host-side collectives and split");
        }
    };
}
