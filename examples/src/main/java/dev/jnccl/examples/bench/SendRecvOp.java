package dev.jnccl.examples.bench;

import dev.jnccl.DeviceTensor;
import dev.jnccl.Transaction;
import java.util.Set;

/**
 * {@code sendrecv}: a ring, every rank sends its {@code count} elements to rank (r+1) % n and
 * receives rank (r-1) % n's, in one transaction ({@code Transaction.send} + {@code recv}).
 * nccl-tests: size = count elements, busbw = algbw. In place sends and receives through the same
 * buffer; like nccl-tests, those results are not checked ({@code N/A}). With one rank it sends to
 * itself. {@code --transport memcpy}: threads mode's memcpy sends and receives.
 */
final class SendRecvOp implements CollectiveOp {
    @Override
    public String name() {
        return "sendrecv";
    }

    @Override
    public boolean reduces() {
        return false;
    }

    @Override
    public boolean redopColumn() {
        return true; // nccl-tests' sendrecv_perf prints (and loops over) -o though nothing is reduced
    }

    @Override
    public Set<String> transports() {
        return Set.of("nccl", "memcpy");
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
        return (rank - 1 + ranks) % ranks;
    }

    @Override
    public long sourceIndex(Shape shape, int rank, int ranks, long i) {
        return i;
    }

    @Override
    public void enqueue(Call call) {
        int rank = call.comm().rank();
        int ranks = call.comm().worldSize();
        long count = call.shape().count();
        DeviceTensor recv = call.recv().slice(0, count);
        DeviceTensor send = call.inPlace() ? recv : call.send().slice(0, count);
        try (Transaction tx = call.comm().begin(call.ready())) {
            tx.send(send, (rank + 1) % ranks);
            tx.recv(recv, (rank - 1 + ranks) % ranks);
            tx.execute(null);
        }
    }
}
