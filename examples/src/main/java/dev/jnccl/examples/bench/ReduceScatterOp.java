package dev.jnccl.examples.bench;

import dev.jnccl.Transaction;

/**
 * {@code reduce_scatter}: rank r gets the reduction of shard r of every rank's input
 * ({@code Transaction.reduceScatter}, in place: the result lands in the rank's own shard).
 * nccl-tests: count = elements per rank (rounded down to 16 bytes), size = count * n elements,
 * busbw = algbw * (n-1)/n. In place only in jnccl: the out-of-place columns stay empty.
 */
final class ReduceScatterOp implements CollectiveOp {
    @Override
    public String name() {
        return "reduce_scatter";
    }

    @Override
    public boolean reduces() {
        return true;
    }

    @Override
    public Shape shape(long bytes, BenchType type, int ranks) {
        long base = CollectiveOps.perRankCount(bytes, type, ranks);
        return new Shape(base, base * ranks, base);
    }

    @Override
    public double busFactor(int ranks) {
        return (ranks - 1) / (double) ranks;
    }

    @Override
    public boolean outOfPlace() {
        return false;
    }

    @Override
    public long inputOffset(Shape shape, int rank, boolean inPlace) {
        return 0;
    }

    @Override
    public long outputOffset(Shape shape, int rank, boolean inPlace) {
        return rank * shape.count();
    }

    @Override
    public int sourceRank(Shape shape, int rank, int ranks, int root, long i) {
        return ALL_RANKS;
    }

    @Override
    public long sourceIndex(Shape shape, int rank, int ranks, long i) {
        return rank * shape.count() + i;
    }

    @Override
    public void enqueue(Call call) {
        try (Transaction tx = call.comm().begin(call.ready())) {
            tx.reduceScatter(call.recv().slice(0, call.shape().send()), call.op());
            tx.execute(null);
        }
    }
}
