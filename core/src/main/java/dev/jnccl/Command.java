package dev.jnccl;

import java.util.Objects;

/**
 * One command of a transaction. Execution is an exhaustive switch over these records.
 *
 * <p>{@link DestructiveAllToAll} is a command next to the four of the original design: its rounds
 * must run as separate, ordered NCCL groups (see {@link AllToAllSchedule}), so it cannot be expanded
 * into plain {@link Send}/{@link Recv} commands of the transaction's one group. A plain
 * {@link AllToAll} runs as a group of its own after the transaction's group, so that its messages
 * never pair with the transaction's sends and receives; {@link Broadcast} and {@link AllReduce} run
 * in the transaction's group like the others.
 */
public sealed interface Command {

    /** {@return the bytes this rank contributes or moves (for logs and telemetry)} */
    long bytes();

    /**
     * All-gather: every rank's {@code shard} ends up in {@code full} at the rank's index.
     *
     * @param shard this rank's shard
     * @param full the gathered tensor (world size times the shard)
     */
    record Gather(DeviceTensor shard, DeviceTensor full) implements Command {
        /** Checks that both tensors are given. */
        public Gather {
            Objects.requireNonNull(shard, "Gather: shard is null");
            Objects.requireNonNull(full, "Gather: full is null");
        }

        @Override
        public long bytes() {
            return full.bytes();
        }
    }

    /**
     * In-place reduce-scatter: shard {@code rank} of {@code tensor} receives the reduction of all ranks' shards.
     *
     * @param tensor the tensor, world size times the shard
     * @param op the reduction
     */
    record ScatterReduce(DeviceTensor tensor, ReduceOp op) implements Command {
        /** Checks that the tensor and the operation are given. */
        public ScatterReduce {
            Objects.requireNonNull(tensor, "ScatterReduce: tensor is null");
            Objects.requireNonNull(op, "ScatterReduce: op is null");
        }

        @Override
        public long bytes() {
            return tensor.bytes();
        }
    }

    /**
     * Point-to-point send of {@code tensor} to {@code peer}.
     *
     * @param tensor what is sent
     * @param peer the receiving rank
     */
    record Send(DeviceTensor tensor, int peer) implements Command {
        /** Checks that the tensor is given. */
        public Send {
            Objects.requireNonNull(tensor, "Send: tensor is null");
        }

        @Override
        public long bytes() {
            return tensor.bytes();
        }
    }

    /**
     * Point-to-point receive into {@code tensor} from {@code peer}.
     *
     * @param tensor where the message lands
     * @param peer the sending rank
     */
    record Recv(DeviceTensor tensor, int peer) implements Command {
        /** Checks that the tensor is given. */
        public Recv {
            Objects.requireNonNull(tensor, "Recv: tensor is null");
        }

        @Override
        public long bytes() {
            return tensor.bytes();
        }
    }

    /**
     * Destructive all-to-all of {@code tensor}'s world-size slots; layout in {@link AllToAllSchedule}.
     *
     * @param tensor the tensor, world size slots
     */
    record DestructiveAllToAll(DeviceTensor tensor) implements Command {
        /** Checks that the tensor is given. */
        public DestructiveAllToAll {
            Objects.requireNonNull(tensor, "DestructiveAllToAll: tensor is null");
        }

        @Override
        public long bytes() {
            return tensor.bytes();
        }
    }

    /**
     * All-to-all from {@code send} into {@code recv} (non-destructive): slot {@code j} of
     * {@code send} goes to rank {@code j}, slot {@code i} of {@code recv} comes from rank {@code i}.
     *
     * @param send this rank's world-size slots, one per destination rank
     * @param recv where the slots from every rank land, in rank order
     */
    record AllToAll(DeviceTensor send, DeviceTensor recv) implements Command {
        /** Checks that both tensors are given. */
        public AllToAll {
            Objects.requireNonNull(send, "AllToAll: send is null");
            Objects.requireNonNull(recv, "AllToAll: recv is null");
        }

        @Override
        public long bytes() {
            return send.bytes();
        }
    }

    /**
     * In-place broadcast: every rank's {@code tensor} receives {@code root}'s.
     *
     * @param tensor the tensor (the source on the root)
     * @param root the rank whose tensor is broadcast
     */
    record Broadcast(DeviceTensor tensor, int root) implements Command {
        /** Checks that the tensor is given. */
        public Broadcast {
            Objects.requireNonNull(tensor, "Broadcast: tensor is null");
        }

        @Override
        public long bytes() {
            return tensor.bytes();
        }
    }

    /**
     * In-place all-reduce: every rank's {@code tensor} receives the reduction over all ranks.
     *
     * @param tensor the tensor
     * @param op the reduction
     */
    record AllReduce(DeviceTensor tensor, ReduceOp op) implements Command {
        /** Checks that the tensor and the operation are given. */
        public AllReduce {
            Objects.requireNonNull(tensor, "AllReduce: tensor is null");
            Objects.requireNonNull(op, "AllReduce: op is null");
        }

        @Override
        public long bytes() {
            return tensor.bytes();
        }
    }
}
