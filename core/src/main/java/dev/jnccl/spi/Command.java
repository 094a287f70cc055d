package dev.jnccl.spi;

import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import java.util.Objects;

/**
 * One command of a transaction, named as the {@link dev.jnccl.Transaction} method that adds it
 * (and as NCCL names the collective). A {@link Transport} sees every command of a transaction and
 * moves the kinds it replaces; the communicator enqueues the rest into NCCL with an exhaustive
 * switch over these records.
 *
 * <p>{@link DestructiveAllToAll} runs as separate, ordered NCCL groups (its rounds must not
 * overlap), so it is never offered to a transport and cannot be expanded into the transaction's
 * sends and receives. A plain {@link AllToAll} runs as a group of its own after the transaction's
 * group, so that its messages never pair with the transaction's sends and receives; the others run
 * in the transaction's one group.
 */
public sealed interface Command {

    /** {@return the bytes this rank contributes or moves (for logs and telemetry)} */
    long bytes();

    /**
     * All-gather: every rank's {@code shard} ends up in {@code full} at the rank's index.
     *
     * @param shard this rank's shard
     * @param full  the gathered tensor (world size times the shard)
     */
    record AllGather(DeviceTensor shard, DeviceTensor full) implements Command {
        /** Checks that both tensors are given. */
        public AllGather {
            require("AllGather", "shard", shard);
            require("AllGather", "full", full);
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
     * @param op     the reduction
     */
    record ReduceScatter(DeviceTensor tensor, ReduceOp op) implements Command {
        /** Checks that the tensor and the operation are given. */
        public ReduceScatter {
            require("ReduceScatter", "tensor", tensor);
            require("ReduceScatter", "op", op);
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
     * @param op     the reduction
     */
    record AllReduce(DeviceTensor tensor, ReduceOp op) implements Command {
        /** Checks that the tensor and the operation are given. */
        public AllReduce {
            require("AllReduce", "tensor", tensor);
            require("AllReduce", "op", op);
        }

        @Override
        public long bytes() {
            return tensor.bytes();
        }
    }

    /**
     * In-place broadcast: every rank's {@code tensor} receives {@code root}'s.
     *
     * @param tensor the tensor (the source on the root)
     * @param root   the rank whose tensor is broadcast
     */
    record Broadcast(DeviceTensor tensor, int root) implements Command {
        /** Checks that the tensor is given. */
        public Broadcast {
            require("Broadcast", "tensor", tensor);
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
     * @param peer   the receiving rank
     */
    record Send(DeviceTensor tensor, int peer) implements Command {
        /** Checks that the tensor is given. */
        public Send {
            require("Send", "tensor", tensor);
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
     * @param peer   the sending rank
     */
    record Recv(DeviceTensor tensor, int peer) implements Command {
        /** Checks that the tensor is given. */
        public Recv {
            require("Recv", "tensor", tensor);
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
            require("AllToAll", "send", send);
            require("AllToAll", "recv", recv);
        }

        @Override
        public long bytes() {
            return send.bytes();
        }
    }

    /**
     * Destructive (in-place) all-to-all of {@code tensor}'s world-size slots, in ordered rounds.
     *
     * @param tensor the tensor, world size slots
     */
    record DestructiveAllToAll(DeviceTensor tensor) implements Command {
        /** Checks that the tensor is given. */
        public DestructiveAllToAll {
            require("DestructiveAllToAll", "tensor", tensor);
        }

        @Override
        public long bytes() {
            return tensor.bytes();
        }
    }

    /** The records' one check: the transaction validated the values, so a null here is a bug of the caller. */
    private static void require(String command, String component, Object value) {
        Objects.requireNonNull(value, () -> command + ": " + component + " is null");
    }
}
