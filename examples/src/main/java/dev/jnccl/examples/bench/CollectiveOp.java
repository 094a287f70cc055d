package dev.jnccl.examples.bench;

import dev.jnccl.Communicator;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import java.util.Set;

/**
 * One operation of the benchmark ({@code all_reduce}, {@code all_gather}, ...): nccl-tests' size
 * convention and bus-bandwidth factor for it, which buffers it reads and writes out of place and in
 * place, what every output element must hold, and how jnccl runs it once. Adding an operation is
 * one small class like this plus a line in {@link CollectiveOps}.
 *
 * <p>Element indices are in elements of the run's type. Each rank has a send buffer and a receive
 * buffer, both {@link #shape large enough} for the largest size. Inputs are test values
 * ({@link BenchType}) keyed by (rank, input index): {@link #sourceRank} and {@link #sourceIndex}
 * say which one every checked output element holds.
 */
interface CollectiveOp {

    /** Marks {@link #sourceRank}: the output element is the reduction of every rank's input at the index. */
    int ALL_RANKS = -1;

    /**
     * Element counts for one size: {@code count} is nccl-tests' {@code count} column (the count
     * passed to NCCL), {@code send} and {@code recv} the elements of each rank's input and output.
     * nccl-tests' {@code size} column is {@code max(send, recv)} elements.
     */
    record Shape(long count, long send, long recv) {
        long sizeBytes(BenchType type) {
            return Math.max(send, recv) * type.size();
        }
    }

    /** nccl-tests' name of the operation, e.g. {@code all_reduce}. */
    String name();

    /** Whether the operation reduces (then the {@code redop} column names {@code -o}, else {@code none}). */
    boolean reduces();

    /**
     * Whether the {@code redop} column names {@code -o} (and {@code -o all} repeats the sizes per
     * operation): the reductions, and sendrecv, as nccl-tests prints it.
     */
    default boolean redopColumn() {
        return reduces();
    }

    /** Whether the operation has a root ({@code -r}); otherwise the {@code root} column is -1. */
    default boolean rooted() {
        return false;
    }

    /** Transports it can run on: {@code nccl}, and {@code memcpy} where threads mode has a memcpy path. */
    default Set<String> transports() {
        return Set.of("nccl");
    }

    /** nccl-tests' shape for {@code bytes} of the type on {@code ranks} ranks. */
    Shape shape(long bytes, BenchType type, int ranks);

    /** nccl-tests' bus-bandwidth factor: busbw = algbw * factor. */
    double busFactor(int ranks);

    /** Whether jnccl's API has an out-of-place form (else those columns stay empty, as nccl-tests prints them). */
    boolean outOfPlace();

    /** Whether in-place results are checked (nccl-tests reports {@code N/A} for sendrecv and alltoall). */
    default boolean checksInPlace() {
        return true;
    }

    /** Where rank {@code rank}'s input starts: in the send buffer out of place, in the receive buffer in place. */
    long inputOffset(Shape shape, int rank, boolean inPlace);

    /** The checked output of rank {@code rank}: its first element in the receive buffer. */
    default long outputOffset(Shape shape, int rank, boolean inPlace) {
        return 0;
    }

    /** How many output elements are checked. */
    default long outputCount(Shape shape) {
        return shape.recv();
    }

    /** The rank whose input output element {@code i} holds, or {@link #ALL_RANKS} for a reduction. */
    int sourceRank(Shape shape, int rank, int ranks, int root, long i);

    /** The input index output element {@code i} holds. */
    long sourceIndex(Shape shape, int rank, int ranks, long i);

    /** Whether rank {@code rank} provides input (only the root of a broadcast; every rank otherwise). */
    default boolean hasInput(int rank, int root) {
        return true;
    }

    /** The buffers and settings of one call. */
    record Call(Communicator comm, DeviceTensor send, DeviceTensor recv, Shape shape, BenchType type, ReduceOp op,
                int root, boolean inPlace, CudaStream compute, CudaEvent ready) {}

    /**
     * Enqueues the operation once on the comms stream (after {@code call.ready()}, or ordered with
     * {@code call.compute()} for convenience operations). Returns at once.
     */
    void enqueue(Call call);
}
