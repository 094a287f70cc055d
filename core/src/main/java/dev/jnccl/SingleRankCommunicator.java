package dev.jnccl;

import java.util.List;

/** World size 1: host-side collectives are the identity. */
final class SingleRankCommunicator extends Communicator {

    SingleRankCommunicator(int device, CommunicatorOptions options) {
        super(UniqueId.generate(), 0, 1, device, options);
    }

    private SingleRankCommunicator(Split split) {
        super(split);
    }

    @Override
    protected Communicator newChild(Split split) {
        return new SingleRankCommunicator(split);
    }

    @Override
    protected void hostBarrier() {}

    @Override
    protected List<byte[]> hostGather(byte[] local, int root) {
        return List.of(local.clone());
    }

    @Override
    protected List<byte[]> hostAllGather(byte[] local) {
        return List.of(local.clone());
    }
}
