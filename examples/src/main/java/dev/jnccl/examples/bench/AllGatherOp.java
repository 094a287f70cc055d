package dev.jnccl.examples.bench;

import dev.jnccl.DeviceTensor;
import dev.jnccl.Transaction;
import java.util.Set;

/**
 * {@code all_gather}: every rank's {@code count} elements land in every rank's output at that
 * rank's index ({@code Transaction.allGather}; in place from the rank's own shard of the output).
 * nccl-tests: count = elements per rank (rounded down to 16 bytes), size = the whole output,
 * busbw = algbw * (n-1)/n. {@code --transport memcpy}: threads mode's memcpy all-gather.
 */
final class AllGatherOp implements CollectiveOp {
    @Override
    public String name() {
        return "all_gather";
    }

    @Override
    public boolean reduces() {
        return false;
    }

    @Override
    public Set<String> transports() {
        return Set.of("nccl", "memcpy");
    }

    @Override
    public Shape shape(long bytes, BenchType type, int ranks) {
        long base = CollectiveOps.perRankCount(bytes, type, ranks);
        return new Shape(base, base, base * ranks);
    }

    @Override
    public double busFactor(int ranks) {
        return (ranks - 1) / (double) ranks;
    }

    @Override
    public boolean outOfPlace() {
        return true;
    }

    @Override
    public long inputOffset(Shape shape, int rank, boolean inPlace) {
        return inPlace ? rank * shape.count() : 0;
    }

    @Override
    public int sourceRank(Shape shape, int rank, int ranks, int root, long i) {
        return (int) (i / shape.count());
    }

    @Override
    public long sourceIndex(Shape shape, int rank, int ranks, long i) {
        return i % shape.count();
    }

    @Override
    public void enqueue(Call call) {
        long base = call.shape().count();
        DeviceTensor full = call.recv().slice(0, call.shape().recv());
        DeviceTensor shard = call.inPlace() ? full.slice(call.comm().rank() * base, base) : call.send().slice(0, base);
        try (Transaction tx = call.comm().begin(call.ready())) {
            tx.allGather(shard, full);
            tx.execute(null);
        }
    }
}
