package dev.jnccl;

import java.util.Objects;

/**
 * One command of a transaction. Execution is an exhaustive switch over these records.
 *
 * <p>{@link AllToAll} is a fifth command next to the four of the original design: its rounds must
 * run as separate, ordered NCCL groups (see {@link AllToAllSchedule}), so it cannot be expanded into
 * plain {@link Send}/{@link Recv} commands of the transaction's one group.
 */
public sealed interface Command {

    /** Bytes this rank contributes or moves (for logs and telemetry). */
    long bytes();

    /** All-gather: every rank's {@code shard} ends up in {@code full} at the rank's index. */
    record Gather(DeviceTensor shard, DeviceTensor full) implements Command {
        public Gather {
            Objects.requireNonNull(shard, "Gather: shard is null");
            Objects.requireNonNull(full, "Gather: full is null");
        }

        @Override
        public long bytes() {
            return full.bytes();
        }
    }

    /** In-place reduce-scatter: shard {@code rank} of {@code tensor} receives the reduction of all ranks' shards. */
    record ScatterReduce(DeviceTensor tensor, ReduceOp op) implements Command {
        public ScatterReduce {
            Objects.requireNonNull(tensor, "ScatterReduce: tensor is null");
            Objects.requireNonNull(op, "ScatterReduce: op is null");
        }

        @Override
        public long bytes() {
            return tensor.bytes();
        }
    }

    /** Point-to-point send of {@code tensor} to {@code peer}. */
    record Send(DeviceTensor tensor, int peer) implements Command {
        public Send {
            Objects.requireNonNull(tensor, "Send: tensor is null");
        }

        @Override
        public long bytes() {
            return tensor.bytes();
        }
    }

    /** Point-to-point receive into {@code tensor} from {@code peer}. */
    record Recv(DeviceTensor tensor, int peer) implements Command {
        public Recv {
            Objects.requireNonNull(tensor, "Recv: tensor is null");
        }

        @Override
        public long bytes() {
            return tensor.bytes();
        }
    }

    /** Destructive all-to-all of {@code tensor}'s world-size slots; layout in {@link AllToAllSchedule}. */
    record AllToAll(DeviceTensor tensor) implements Command {
        public AllToAll {
            Objects.requireNonNull(tensor, "AllToAll: tensor is null");
        }

        @Override
        public long bytes() {
            return tensor.bytes();
        }
    }
}
