package dev.jnccl.examples.bench;

import dev.jnccl.DeviceTensor;
import dev.jnccl.Transaction;

/**
 * {@code broadcast}: the root's {@code count} elements land in every rank's buffer
 * ({@code Transaction.broadcast}, in place: jnccl has no out-of-place form, so those columns stay
 * empty). nccl-tests: size = count elements, busbw = algbw, root {@code -r}.
 */
final class BroadcastOp implements CollectiveOp {
    @Override
    public String name() {
        return "broadcast";
    }

    @Override
    public boolean reduces() {
        return false;
    }

    @Override
    public boolean rooted() {
        return true;
    }

    @Override
    public Shape shape(long bytes, BenchType type, int ranks) {
        long count = bytes / type.size();
        return new Shape(count, count, count);
    }

    @Override
    public double busFactor(int ranks) {
        return 1;
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
    public boolean hasInput(int rank, int root) {
        return rank == root;
    }

    @Override
    public int sourceRank(Shape shape, int rank, int ranks, int root, long i) {
        return root;
    }

    @Override
    public long sourceIndex(Shape shape, int rank, int ranks, long i) {
        return i;
    }

    @Override
    public void enqueue(Call call) {
        DeviceTensor tensor = call.recv().slice(0, call.shape().count());
        try (Transaction tx = call.comm().begin(call.ready())) {
            tx.broadcast(tensor, call.root());
            tx.execute(null);
        }
    }
}
