package dev.jnccl.examples.bench;

import dev.jnccl.DeviceTensor;
import dev.jnccl.Transaction;
import java.util.Set;

/**
 * {@code alltoall}: slot {@code j} of every rank's input goes to rank {@code j}, slot {@code i} of
 * the output comes from rank {@code i} ({@code Transaction.allToAll}). nccl-tests: count = elements
 * per slot (rounded down to 16 bytes), size = the whole buffer, busbw = algbw * (n-1)/n. In place
 * runs jnccl's in-place form, {@code destructiveAllToAll} (another slot layout), unchecked like
 * nccl-tests' in-place alltoall ({@code N/A}). {@code --transport memcpy}: threads mode's memcpy
 * send/recv.
 */
final class AllToAllOp implements CollectiveOp {
    @Override
    public String name() {
        return "alltoall";
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
        return new Shape(base, base * ranks, base * ranks);
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
    public boolean checksInPlace() {
        return false;
    }

    @Override
    public long inputOffset(Shape shape, int rank, boolean inPlace) {
        return 0;
    }

    @Override
    public int sourceRank(Shape shape, int rank, int ranks, int root, long i) {
        return (int) (i / shape.count());
    }

    @Override
    public long sourceIndex(Shape shape, int rank, int ranks, long i) {
        return rank * shape.count() + i % shape.count();
    }

    @Override
    public void enqueue(Call call) {
        long total = call.shape().recv();
        DeviceTensor recv = call.recv().slice(0, total);
        try (Transaction tx = call.comm().begin(call.ready())) {
            if (call.inPlace()) {
                tx.destructiveAllToAll(recv);
            } else {
                tx.allToAll(call.send().slice(0, total), recv);
            }
            tx.execute(null);
        }
    }
}
