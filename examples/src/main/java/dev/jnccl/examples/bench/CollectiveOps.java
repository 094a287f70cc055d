package dev.jnccl.examples.bench;

import java.util.LinkedHashMap;
import java.util.Map;

/** The operations {@code bench.sh OP} knows, by nccl-tests' names, and what they share. */
final class CollectiveOps {
    private CollectiveOps() {}

    /** Supported operations, in the order the usage lists them. */
    private static final Map<String, CollectiveOp> SUPPORTED = new LinkedHashMap<>();
    /** Known operations jnccl's API cannot run yet, with the reason. */
    private static final Map<String, String> PENDING = new LinkedHashMap<>();

    static {
        for (CollectiveOp op : new CollectiveOp[] {new AllReduceOp(), new ReduceScatterOp(), new AllGatherOp(),
                new SendRecvOp(), new AllToAllOp(), new BroadcastOp()}) {
            SUPPORTED.put(op.name(), op);
        }
        // An operation jnccl's API cannot run yet goes here, with the reason, until its CollectiveOp exists.
    }

    /** The operation named {@code name}; a clear error for a known but unsupported or an unknown one. */
    static CollectiveOp byName(String name) {
        CollectiveOp op = SUPPORTED.get(name);
        if (op != null) {
            return op;
        }
        String pending = PENDING.get(name);
        if (pending != null) {
            throw new UnsupportedOperationException("operation '" + name + "' is not supported yet: " + pending);
        }
        throw new IllegalArgumentException("unknown operation '" + name + "' (known: " + String.join(", ", names())
                + ")");
    }

    /** Every operation name, supported or pending. */
    static Iterable<String> names() {
        java.util.List<String> names = new java.util.ArrayList<>(SUPPORTED.keySet());
        names.addAll(PENDING.keySet());
        return names;
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
