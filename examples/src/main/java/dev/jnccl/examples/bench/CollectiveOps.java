package dev.jnccl.examples.bench;

import java.util.LinkedHashMap;
import java.util.Map;

/** The operations {@code bench.sh OP} knows, by nccl-tests' names, and what they share. */
final class CollectiveOps {
    private CollectiveOps() {}

    /** Supported operations, in the order the usage lists them. */
    private static final Map<String, CollectiveOp> SUPPORTED = new LinkedHashMap<>();

    static {
        for (CollectiveOp op : new CollectiveOp[] {new AllReduceOp(), new ReduceScatterOp(), new AllGatherOp(),
                new SendRecvOp(), new AllToAllOp(), new BroadcastOp()}) {
            SUPPORTED.put(op.name(), op);
        }
    }

    /** The operation named {@code name}; a clear error for an unknown one. */
    static CollectiveOp byName(String name) {
        CollectiveOp op = SUPPORTED.get(name);
        if (op != null) {
            return op;
        }
        throw new IllegalArgumentException("unknown operation '" + name + "' (known: " + String.join(", ", supported())
                + ")");
    }

    /** The names of the supported operations. */
    static Iterable<String> supported() {
        return SUPPORTED.keySet();
    }

    /**
     * nccl-tests' per-rank element count of the sharded operations (all_gather, reduce_scatter,
     * alltoall): {@code bytes / size / ranks}, rounded down to a multiple of 16 bytes.
     */
    static long perRankCount(long bytes, BenchType type, int ranks) {
        long perRank = bytes / type.size() / ranks;
        long align = Math.max(1, 16 / type.size());
        return perRank - perRank % align;
    }
}
