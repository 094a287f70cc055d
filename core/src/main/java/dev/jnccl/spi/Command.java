package dev.jnccl.spi;

import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.bindings.NcclFeature;
import java.util.Arrays;
import java.util.Objects;

/**
 * One command of a transaction: a {@link Kind} (the one row that says what the data path needs to
 * know of a collective) and its arguments, as NCCL takes them. In place is {@code src == dst}, as in
 * NCCL (for a scattered or gathered shape: the tensor and this rank's slot of it), so there is one
 * command per collective, never an in-place twin. Immutable; a {@link Transport} sees every command
 * of a transaction and moves the kinds it replaces, the communicator enqueues the rest into NCCL.
 */
public final class Command {

    /** Where a kind runs with respect to the transaction's one NCCL group. */
    public enum Group {
        /** In the transaction's one group, with its other commands. */
        TRANSACTION,
        /**
         * In a group of its own after the transaction's group, in command order: NCCL runs it as
         * point-to-point traffic, which must never pair with the transaction's own sends and receives.
         */
        OWN,
        /** As ordered rounds, each a group of its own, always through NCCL (the order is what makes it safe). */
        ROUNDS
    }

    /** How a kind's two buffers relate: their counts, and when they are in place. */
    public enum Shape {
        /** One buffer ({@code src == dst}): a send, a receive, a destructive all-to-all. */
        ONE,
        /** {@code dst} has {@code src}'s count; in place when they are the same. */
        SAME,
        /** {@code src} is world size times {@code dst}; in place when {@code dst} is this rank's slot of {@code src}. */
        SCATTERED,
        /** {@code dst} is world size times {@code src}; in place when {@code src} is this rank's slot of {@code dst}. */
        GATHERED,
        /** {@code src} and {@code dst} of one count, a slot per rank, apart. */
        EXCHANGED,
        /** Blocks per peer of the given send and receive counts, in rank order (the uneven all-to-all). */
        COUNTED,
        /**
         * One block per rank of the given counts, in rank order in {@code dst}; this rank's is the
         * whole {@code src}, in place when it is that block of {@code dst} (the uneven all-gather).
         */
        BLOCKS
    }

    /** What a command's rank argument names. */
    public enum Role {
        /** No rank argument. */
        NONE,
        /** The root of a rooted collective. */
        ROOT,
        /** The peer of a send or receive. */
        PEER
    }

    /** Which buffer only the root needs (ranks elsewhere may pass null). */
    public enum RootOnly {
        /** Every rank gives both. */
        NONE,
        /** The source is read on the root only (scatter). */
        SRC,
        /** The destination is written on the root only (reduce, gather). */
        DST
    }

    /**
     * The NCCL functions commands run as, with the feature an older NCCL lacks (null: every NCCL
     * jnccl loads has it). The communicator calls NCCL through one table indexed by these.
     */
    public enum Function {
        /** {@code ncclAllReduce}. */
        ALL_REDUCE("ncclAllReduce", null),
        /** {@code ncclReduceScatter}. */
        REDUCE_SCATTER("ncclReduceScatter", null),
        /** {@code ncclAllGather}. */
        ALL_GATHER("ncclAllGather", null),
        /** {@code ncclBroadcast}. */
        BROADCAST("ncclBroadcast", null),
        /** {@code ncclReduce}. */
        REDUCE("ncclReduce", null),
        /** {@code ncclGather} (NCCL 2.28). */
        GATHER("ncclGather", NcclFeature.GATHER),
        /** {@code ncclScatter} (NCCL 2.28). */
        SCATTER("ncclScatter", NcclFeature.SCATTER),
        /** {@code ncclAlltoAll} (NCCL 2.28). */
        ALL_TO_ALL("ncclAlltoAll", NcclFeature.ALL_TO_ALL),
        /** {@code ncclSend}. */
        SEND("ncclSend", null),
        /** {@code ncclRecv}. */
        RECV("ncclRecv", null);

        private final String ncclName;
        private final NcclFeature feature;

        Function(String ncclName, NcclFeature feature) {
            this.ncclName = ncclName;
            this.feature = feature;
        }

        /** {@return NCCL's name of the function} */
        public String ncclName() {
            return ncclName;
        }

        /** {@return the feature an older NCCL lacks, or null} */
        public NcclFeature feature() {
            return feature;
        }
    }

    /**
     * The collectives, one row each: the {@code Transaction} method that adds it, the NCCL function
     * that runs it (where the loaded NCCL lacks that function's feature, or the kind has no function
     * of its own: the function it is built from, its sends and receives or broadcasts), its group,
     * its buffers' shape and names, its rank argument, and whether it reduces.
     */
    public enum Kind {
        /** All-reduce: every rank's {@code dst} receives the reduction over all ranks of {@code src}. */
        ALL_REDUCE("allReduce", Function.ALL_REDUCE, Group.TRANSACTION, Shape.SAME, Role.NONE, RootOnly.NONE,
                true, "src", "dst"),
        /** Reduce-scatter: {@code dst} receives the reduction of slot {@code rank} of every rank's {@code src}. */
        REDUCE_SCATTER("reduceScatter", Function.REDUCE_SCATTER, Group.TRANSACTION, Shape.SCATTERED, Role.NONE,
                RootOnly.NONE, true, "src", "dst"),
        /** All-gather: every rank's {@code src} lands in every {@code dst} at the rank's slot. */
        ALL_GATHER("allGather", Function.ALL_GATHER, Group.TRANSACTION, Shape.GATHERED, Role.NONE, RootOnly.NONE,
                false, "shard", "full"),
        /** Broadcast: every rank's {@code dst} receives the root's {@code src}. */
        BROADCAST("broadcast", Function.BROADCAST, Group.TRANSACTION, Shape.SAME, Role.ROOT, RootOnly.NONE, false,
                "src", "dst"),
        /** Reduce: the root's {@code dst} receives the reduction over all ranks of {@code src}. */
        REDUCE("reduce", Function.REDUCE, Group.TRANSACTION, Shape.SAME, Role.ROOT, RootOnly.DST, true, "src",
                "dst"),
        /** Gather: every rank's {@code src} lands in the root's {@code dst} at the rank's slot. */
        GATHER("gather", Function.GATHER, Group.OWN, Shape.GATHERED, Role.ROOT, RootOnly.DST, false,
                "src", "dst"),
        /** Scatter: slot {@code rank} of the root's {@code src} lands in every rank's {@code dst}. */
        SCATTER("scatter", Function.SCATTER, Group.OWN, Shape.SCATTERED, Role.ROOT, RootOnly.SRC,
                false, "src", "dst"),
        /** All-to-all: slot {@code j} of {@code src} goes to rank {@code j}, slot {@code i} of {@code dst} comes from rank {@code i}. */
        ALL_TO_ALL("allToAll", Function.ALL_TO_ALL, Group.OWN, Shape.EXCHANGED, Role.NONE,
                RootOnly.NONE, false, "send", "recv"),
        /** Uneven all-to-all: {@link #sendCount}{@code (q)} elements to rank {@code q}, {@link #recvCount}{@code (p)} from rank {@code p}. */
        UNEVEN_ALL_TO_ALL("allToAll", Function.SEND, Group.OWN, Shape.COUNTED, Role.NONE, RootOnly.NONE,
                false, "send", "recv"),
        /** Uneven all-gather: rank {@code p}'s {@code src} ({@link #recvCount}{@code (p)} elements) lands in every {@code dst} after the blocks of the ranks before it. */
        ALL_GATHER_V("allGather", Function.BROADCAST, Group.OWN, Shape.BLOCKS, Role.NONE, RootOnly.NONE, false,
                "shard", "full"),
        /** Destructive (in-place) all-to-all of the world-size slots of one tensor, in ordered rounds. */
        DESTRUCTIVE_ALL_TO_ALL("destructiveAllToAll", Function.SEND, Group.ROUNDS, Shape.ONE, Role.NONE,
                RootOnly.NONE, false, "tensor", "tensor"),
        /** Point-to-point send of {@code src} to the peer. */
        SEND("send", Function.SEND, Group.TRANSACTION, Shape.ONE, Role.PEER, RootOnly.NONE, false, "tensor",
                "tensor"),
        /** Point-to-point receive into {@code dst} from the peer. */
        RECV("recv", Function.RECV, Group.TRANSACTION, Shape.ONE, Role.PEER, RootOnly.NONE, false, "tensor",
                "tensor");

        private final String method;
        private final Function function;
        private final Group group;
        private final Shape shape;
        private final Role role;
        private final RootOnly rootOnly;
        private final boolean reduces;
        private final String srcName;
        private final String dstName;

        Kind(String method, Function function, Group group, Shape shape, Role role, RootOnly rootOnly,
             boolean reduces, String srcName, String dstName) {
            this.method = method;
            this.function = function;
            this.group = group;
            this.shape = shape;
            this.role = role;
            this.rootOnly = rootOnly;
            this.reduces = reduces;
            this.srcName = srcName;
            this.dstName = dstName;
        }

        /** {@return the {@code Transaction} method that adds it (the name in messages)} */
        public String method() {
            return method;
        }

        /** {@return the NCCL function that runs it, or that it is built from (for sends and receives: the send)} */
        public Function function() {
            return function;
        }

        /** {@return where it runs with respect to the transaction's group} */
        public Group group() {
            return group;
        }

        /** {@return how its buffers relate} */
        public Shape shape() {
            return shape;
        }

        /** {@return what its rank argument names} */
        public Role role() {
            return role;
        }

        /** {@return which buffer only the root needs} */
        public RootOnly rootOnly() {
            return rootOnly;
        }

        /** {@return whether it reduces (takes a {@link ReduceOp})} */
        public boolean reduces() {
            return reduces;
        }

        /** {@return the name of its source argument in messages} */
        public String srcName() {
            return srcName;
        }

        /** {@return the name of its destination argument in messages} */
        public String dstName() {
            return dstName;
        }
    }

    private final Kind kind;
    private final DeviceTensor src;
    private final DeviceTensor dst;
    private final ReduceOp op;
    private final int rank;
    private final long[] sendCounts;
    private final long[] recvCounts;

    private Command(Kind kind, DeviceTensor src, DeviceTensor dst, ReduceOp op, int rank, long[] sendCounts,
                    long[] recvCounts) {
        this.kind = Objects.requireNonNull(kind, "Command: kind is null");
        if (src == null && dst == null) {
            throw new NullPointerException("Command: " + kind.method + " has neither " + kind.srcName + " nor "
                    + kind.dstName);
        }
        if (kind.reduces && op == null) {
            throw new NullPointerException("Command: " + kind.method + " has no op");
        }
        this.src = src;
        this.dst = dst;
        this.op = kind.reduces ? op : null;
        this.rank = kind.role == Role.NONE ? -1 : rank;
        this.sendCounts = sendCounts == null ? null : sendCounts.clone();
        this.recvCounts = recvCounts == null ? null : recvCounts.clone();
    }

    /**
     * A command of an even kind. The transaction checked the arguments; only what would make the
     * command meaningless is refused here.
     *
     * @param kind the collective
     * @param src  the source (for {@link Shape#ONE} the tensor: the same as {@code dst}); null where {@link RootOnly#SRC} off the root
     * @param dst  the destination; null where {@link RootOnly#DST} off the root
     * @param op   the reduction, for a kind that reduces (ignored otherwise)
     * @param rank the root or peer ({@link Kind#role()}); ignored for {@link Role#NONE}
     * @return the command
     */
    public static Command of(Kind kind, DeviceTensor src, DeviceTensor dst, ReduceOp op, int rank) {
        return new Command(kind, src, dst, op, rank, null, null);
    }

    /**
     * A command of a kind with counts ({@link Shape#COUNTED}, {@link Shape#BLOCKS}); the arrays are copied.
     *
     * @param kind       a kind of shape {@link Shape#COUNTED} or {@link Shape#BLOCKS}
     * @param src        the blocks sent (for {@link Shape#BLOCKS}: this rank's block)
     * @param sendCounts elements sent to each rank (null for {@link Shape#BLOCKS}: its one block goes to all)
     * @param dst        where the blocks from every rank land, in rank order
     * @param recvCounts elements received from each rank
     * @return the command
     */
    public static Command counted(Kind kind, DeviceTensor src, long[] sendCounts, DeviceTensor dst,
                                  long[] recvCounts) {
        if (kind.shape != Shape.COUNTED && kind.shape != Shape.BLOCKS) {
            throw new IllegalArgumentException("Command.counted: " + kind + " has no counts");
        }
        Objects.requireNonNull(recvCounts, "Command: " + kind.method + " has no recvCounts");
        return new Command(kind, Objects.requireNonNull(src, "Command: src is null"), sendCounts,
                Objects.requireNonNull(dst, "Command: dst is null"), recvCounts);
    }

    private Command(Kind kind, DeviceTensor src, long[] sendCounts, DeviceTensor dst, long[] recvCounts) {
        this(kind, src, dst, null, -1, sendCounts, recvCounts);
    }

    /**
     * Whether this command is the one {@link #of} or {@link #counted} would make of these
     * arguments: how a reused command buffer compares before it builds (identity first, since a
     * training loop passes the same tensor objects; no copy of the counts).
     *
     * @param kind       the collective
     * @param src        the source
     * @param dst        the destination
     * @param op         the reduction (ignored when the kind does not reduce)
     * @param rank       the root or peer (ignored when the kind has none)
     * @param sendCounts the send counts of a counted kind, else null
     * @param recvCounts the receive counts of a counted kind, else null
     * @return whether they match
     */
    public boolean matches(Kind kind, DeviceTensor src, DeviceTensor dst, ReduceOp op, int rank, long[] sendCounts,
                           long[] recvCounts) {
        return this.kind == kind && same(this.src, src) && same(this.dst, dst)
                && (!kind.reduces || this.op.equals(op)) && (kind.role == Role.NONE || this.rank == rank)
                && Arrays.equals(this.sendCounts, sendCounts) && Arrays.equals(this.recvCounts, recvCounts);
    }

    private static boolean same(DeviceTensor a, DeviceTensor b) {
        return a == b || (a != null && a.equals(b));
    }

    /** {@return the collective} */
    public Kind kind() {
        return kind;
    }

    /** {@return the source (for one-buffer kinds the tensor); null off the root where only the root reads it} */
    public DeviceTensor src() {
        return src;
    }

    /** {@return the destination (for one-buffer kinds the tensor); null off the root where only the root writes it} */
    public DeviceTensor dst() {
        return dst;
    }

    /** {@return whether source and destination are one buffer as NCCL sees it (the same tensor)} */
    public boolean isSameTensor() {
        return src == dst || (src != null && src.equals(dst));
    }

    /** {@return the reduction, or null for a kind that does not reduce} */
    public ReduceOp op() {
        return op;
    }

    /** {@return the root of a rooted kind, or -1} */
    public int root() {
        return kind.role == Role.ROOT ? rank : -1;
    }

    /** {@return the peer of a send or receive, or -1} */
    public int peer() {
        return kind.role == Role.PEER ? rank : -1;
    }

    /** {@return the element type} */
    public DType dtype() {
        return src != null ? src.dtype() : dst.dtype();
    }

    /**
     * The number of elements sent to {@code peer} by a counted kind (no copy of the array).
     *
     * @param peer a rank
     * @return the count; for the uneven all-gather, this rank's block to every peer
     * @throws IllegalArgumentException when {@code peer} is not in {@code [0, world size)}
     * @throws IllegalStateException    when the kind has no counts
     */
    public long sendCount(int peer) {
        int checked = requirePeer("sendCount", peer);
        return sendCounts == null ? src.count() : sendCounts[checked];
    }

    /**
     * The number of elements received from {@code peer} by a counted kind (no copy of the array).
     *
     * @param peer a rank
     * @return the count
     * @throws IllegalArgumentException when {@code peer} is not in {@code [0, world size)}
     * @throws IllegalStateException    when the kind has no counts
     */
    public long recvCount(int peer) {
        return recvCounts()[requirePeer("recvCount", peer)];
    }

    private long[] recvCounts() {
        if (recvCounts == null) {
            throw new IllegalStateException("Command: " + kind + " has no counts");
        }
        return recvCounts;
    }

    /** {@return a copy of the counts sent to each rank, or null} */
    public long[] sendCounts() {
        return sendCounts == null ? null : sendCounts.clone();
    }

    /** {@return a copy of the counts received from each rank, or null} */
    public long[] receiveCounts() {
        return recvCounts == null ? null : recvCounts.clone();
    }

    /** {@return {@code peer}} when it names a rank of the counts, else a refusal naming it and the range. */
    private int requirePeer(String method, int peer) {
        int world = recvCounts().length;
        if (peer < 0 || peer >= world) {
            throw new IllegalArgumentException("Command." + method + ": peer " + peer + " out of range [0, " + world
                    + ")");
        }
        return peer;
    }

    /** {@return the bytes this rank contributes or moves (for logs and telemetry): its larger buffer, or its blocks} */
    public long bytes() {
        if (kind.shape == Shape.COUNTED || kind.shape == Shape.BLOCKS) {
            long elements = 0;
            for (long count : sendCounts != null ? sendCounts : recvCounts) {
                elements += count;
            }
            return elements * dtype().size();
        }
        return Math.max(src == null ? 0 : src.bytes(), dst == null ? 0 : dst.bytes());
    }

    /** {@return what it does in one line, as the flight recorder and the diagnosis print it} */
    public String describe() {
        StringBuilder sb = new StringBuilder(kind.method);
        if (kind.shape == Shape.COUNTED || kind.shape == Shape.BLOCKS) {
            sb.append(" (uneven)");
        }
        if (op != null) {
            sb.append(' ').append(op);
        }
        sb.append(' ').append(dtype()).append(' ');
        switch (kind.shape) {
            case COUNTED, BLOCKS -> {
                if (sendCounts != null) {
                    sb.append("sendCounts ").append(Arrays.toString(sendCounts)).append(' ');
                }
                sb.append(sendCounts != null ? "recvCounts " : "counts ").append(Arrays.toString(recvCounts));
            }
            case SCATTERED -> sb.append(src == null ? "" : src.count() + " elements -> ").append("slot ")
                    .append(dst.count());
            case GATHERED -> sb.append("slot ").append(src.count())
                    .append(dst == null ? "" : " elements -> " + dst.count());
            default -> sb.append(src != null ? src.count() : dst.count()).append(" elements");
        }
        sb.append(" (").append(bytes()).append(" bytes)");
        if (kind.role == Role.ROOT) {
            sb.append(kind == Kind.BROADCAST || kind == Kind.SCATTER ? " from rank " : " to rank ").append(rank);
        } else if (kind.role == Role.PEER) {
            sb.append(kind == Kind.SEND ? " to rank " : " from rank ").append(rank);
        }
        if (kind.shape == Shape.SAME && src != null && dst != null && !isSameTensor()) {
            sb.append(", out of place");
        }
        return sb.toString();
    }

    @Override
    public boolean equals(Object other) {
        return other instanceof Command that && matches(that.kind, that.src, that.dst, that.op, that.rank,
                that.sendCounts, that.recvCounts);
    }

    @Override
    public int hashCode() {
        return Objects.hash(kind, src, dst, op, rank, Arrays.hashCode(sendCounts), Arrays.hashCode(recvCounts));
    }

    @Override
    public String toString() {
        return "Command[" + kind + ": " + describe() + ", src=" + src + ", dst=" + dst + "]";
    }
}
