package dev.jnccl.spi;

import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import java.util.Arrays;
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

    /**
     * Out-of-place all-reduce: {@code dst} receives the reduction over all ranks of {@code src}
     * (the in-place form is {@link AllReduce}).
     *
     * @param src this rank's contribution
     * @param dst the result, as many elements as {@code src}
     * @param op  the reduction
     */
    record AllReduceOutOfPlace(DeviceTensor src, DeviceTensor dst, ReduceOp op) implements Command {
        /** Checks that the tensors and the operation are given. */
        public AllReduceOutOfPlace {
            require("AllReduceOutOfPlace", "src", src);
            require("AllReduceOutOfPlace", "dst", dst);
            require("AllReduceOutOfPlace", "op", op);
        }

        @Override
        public long bytes() {
            return src.bytes();
        }
    }

    /**
     * Out-of-place reduce-scatter: {@code dst} receives the reduction of shard {@code rank} of all
     * ranks' {@code src} (the in-place form is {@link ReduceScatter}).
     *
     * @param src this rank's contribution, world size times {@code dst}
     * @param dst this rank's reduced shard
     * @param op  the reduction
     */
    record ReduceScatterOutOfPlace(DeviceTensor src, DeviceTensor dst, ReduceOp op) implements Command {
        /** Checks that the tensors and the operation are given. */
        public ReduceScatterOutOfPlace {
            require("ReduceScatterOutOfPlace", "src", src);
            require("ReduceScatterOutOfPlace", "dst", dst);
            require("ReduceScatterOutOfPlace", "op", op);
        }

        @Override
        public long bytes() {
            return src.bytes();
        }
    }

    /**
     * Out-of-place broadcast: every rank's {@code dst} receives {@code root}'s {@code src} (the
     * in-place form is {@link Broadcast}); {@code src} is read on the root only.
     *
     * @param src  the source (read on the root)
     * @param dst  where the root's source lands, as many elements
     * @param root the rank whose {@code src} is broadcast
     */
    record BroadcastOutOfPlace(DeviceTensor src, DeviceTensor dst, int root) implements Command {
        /** Checks that the tensors are given. */
        public BroadcastOutOfPlace {
            require("BroadcastOutOfPlace", "src", src);
            require("BroadcastOutOfPlace", "dst", dst);
        }

        @Override
        public long bytes() {
            return dst.bytes();
        }
    }

    /**
     * Reduce: the root's {@code dst} receives the reduction over all ranks of {@code src}.
     *
     * @param src  this rank's contribution
     * @param dst  the result on the root (in place when it is {@code src}); null or unused elsewhere
     * @param op   the reduction
     * @param root the rank that receives the result
     */
    record Reduce(DeviceTensor src, DeviceTensor dst, ReduceOp op, int root) implements Command {
        /** Checks that the source and the operation are given. */
        public Reduce {
            require("Reduce", "src", src);
            require("Reduce", "op", op);
        }

        @Override
        public long bytes() {
            return src.bytes();
        }
    }

    /**
     * Gather: every rank's {@code src} lands in the root's {@code dst} at the rank's index.
     *
     * @param src  this rank's contribution
     * @param dst  world size times {@code src} on the root; null or unused elsewhere
     * @param root the receiving rank
     */
    record Gather(DeviceTensor src, DeviceTensor dst, int root) implements Command {
        /** Checks that the source is given. */
        public Gather {
            require("Gather", "src", src);
        }

        @Override
        public long bytes() {
            return src.bytes();
        }
    }

    /**
     * Scatter: slot {@code rank} of the root's {@code src} lands in every rank's {@code dst}.
     *
     * @param src  world size times {@code dst} on the root; null or unused elsewhere
     * @param dst  this rank's slot
     * @param root the sending rank
     */
    record Scatter(DeviceTensor src, DeviceTensor dst, int root) implements Command {
        /** Checks that the destination is given. */
        public Scatter {
            require("Scatter", "dst", dst);
        }

        @Override
        public long bytes() {
            return dst.bytes();
        }
    }

    /**
     * Uneven all-to-all: this rank sends {@code sendCounts[q]} elements to rank {@code q}, from
     * {@code send} at the sum of the counts before {@code q}, and receives {@code recvCounts[p]}
     * elements from rank {@code p} into {@code recv} at the sum of the counts before {@code p}.
     * The arrays are copied in and out: the record cannot be changed through them.
     *
     * @param send       the blocks for every rank, in rank order
     * @param sendCounts elements for each rank (world size entries)
     * @param recv       where the blocks from every rank land, in rank order
     * @param recvCounts elements from each rank (world size entries)
     */
    record UnevenAllToAll(DeviceTensor send, long[] sendCounts, DeviceTensor recv, long[] recvCounts)
            implements Command {
        /** Checks that everything is given, and copies the counts. */
        public UnevenAllToAll {
            require("UnevenAllToAll", "send", send);
            require("UnevenAllToAll", "sendCounts", sendCounts);
            require("UnevenAllToAll", "recv", recv);
            require("UnevenAllToAll", "recvCounts", recvCounts);
            sendCounts = sendCounts.clone();
            recvCounts = recvCounts.clone();
        }

        /** {@return a copy of the elements sent to each rank} */
        @Override
        public long[] sendCounts() {
            return sendCounts.clone();
        }

        /** {@return a copy of the elements received from each rank} */
        @Override
        public long[] recvCounts() {
            return recvCounts.clone();
        }

        /**
         * The number of elements sent to {@code peer} (no copy of the array).
         *
         * @param peer a rank
         * @return {@code sendCounts[peer]}
         * @throws IllegalArgumentException when {@code peer} is not in {@code [0, world size)}
         */
        public long sendCount(int peer) {
            return sendCounts[requirePeer("sendCount", peer)];
        }

        /**
         * The number of elements received from {@code peer} (no copy of the array).
         *
         * @param peer a rank
         * @return {@code recvCounts[peer]}
         * @throws IllegalArgumentException when {@code peer} is not in {@code [0, world size)}
         */
        public long recvCount(int peer) {
            return recvCounts[requirePeer("recvCount", peer)];
        }

        /**
         * The block of {@code send} for {@code peer}.
         *
         * @param peer a rank
         * @return the view of {@code send} sent to {@code peer}
         */
        public DeviceTensor sendBlock(int peer) {
            return block(send, sendCounts, requirePeer("sendBlock", peer));
        }

        /**
         * The block of {@code recv} that {@code peer}'s message fills.
         *
         * @param peer a rank
         * @return the view of {@code recv} received from {@code peer}
         */
        public DeviceTensor recvBlock(int peer) {
            return block(recv, recvCounts, requirePeer("recvBlock", peer));
        }

        /** {@return {@code peer}} when it names a rank of the counts, else a refusal naming it and the range. */
        private int requirePeer(String method, int peer) {
            if (peer < 0 || peer >= sendCounts.length) {
                throw new IllegalArgumentException("UnevenAllToAll." + method + ": peer " + peer
                        + " out of range [0, " + sendCounts.length + ")");
            }
            return peer;
        }

        private static DeviceTensor block(DeviceTensor tensor, long[] counts, int peer) {
            long offset = 0;
            for (int q = 0; q < peer; q++) {
                offset += counts[q];
            }
            return tensor.slice(offset, counts[peer]);
        }

        @Override
        public long bytes() {
            long elements = 0;
            for (long count : sendCounts) {
                elements += count;
            }
            return elements * send.dtype().size();
        }

        @Override
        public boolean equals(Object other) {
            return other instanceof UnevenAllToAll that && send.equals(that.send) && recv.equals(that.recv)
                    && Arrays.equals(sendCounts, that.sendCounts)
                    && Arrays.equals(recvCounts, that.recvCounts);
        }

        @Override
        public int hashCode() {
            return Objects.hash(send, recv, Arrays.hashCode(sendCounts), Arrays.hashCode(recvCounts));
        }

        @Override
        public String toString() {
            return "UnevenAllToAll[send=" + send + ", sendCounts=" + Arrays.toString(sendCounts) + ", recv="
                    + recv + ", recvCounts=" + Arrays.toString(recvCounts) + "]";
        }
    }

    /** The records' one check: the transaction validated the values, so a null here is a bug of the caller. */
    private static void require(String command, String component, Object value) {
        Objects.requireNonNull(value, () -> command + ": " + component + " is null");
    }
}
