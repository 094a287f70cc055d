package dev.jnccl.examples.bench;

/**
 * {@code all_reduce}: every rank gets the reduction of all ranks' {@code count} elements
 * ({@code Communicator.allReduce}, the convenience operation, ordered with the compute stream).
 * nccl-tests: size = count elements, busbw = algbw * 2(n-1)/n. jnccl's all-reduce is in place
 * only, so the out-of-place columns stay empty.
 */
final class AllReduceOp implements CollectiveOp {
    @Override
    public String name() {
        return "all_reduce";
    }

    @Override
    public boolean reduces() {
        return true;
    }

    @Override
    public Shape shape(long bytes, BenchType type, int ranks) {
        long count = bytes / type.size();
        return new Shape(count, count, count);
    }

    @Override
    public double busFactor(int ranks) {
        return 2.0 * (ranks - 1) / ranks;
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
    public int sourceRank(Shape shape, int rank, int ranks, int root, long i) {
        return ALL_RANKS;
    }

    @Override
    public long sourceIndex(Shape shape, int rank, int ranks, long i) {
        return i;
    }

    @Override
    public void enqueue(Call call) {
        call.comm().allReduce(call.recv().slice(0, call.shape().count()), call.op(), call.compute());
    }
}
