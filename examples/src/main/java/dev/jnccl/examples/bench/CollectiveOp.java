package dev.jnccl.examples.bench;

import dev.jnccl.Communicator;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.function.BiConsumer;
import java.util.function.IntToDoubleFunction;

/**
 * The operations of the benchmark, one row each (the table of {@code docs/performance.md}):
 * nccl-tests' name, where every checked output element comes from, how the buffers are divided into
 * per-rank slots (which gives nccl-tests' size convention), nccl-tests' bus-bandwidth factor, which
 * placements jnccl has and checks, the transports, and the jnccl call that issues it once. Adding an
 * operation is one row.
 *
 * <p>Element indices are in elements of the run's type. Each rank has a send buffer and a receive
 * buffer, both {@link #shape large enough} for the largest size. Inputs are test values
 * ({@link BenchType}) keyed by (rank, input index): {@link #sourceRank} and {@link #sourceIndex}
 * say which one every checked output element holds.
 */
enum CollectiveOp {
    /**
     * Every rank gets the reduction of all ranks' {@code count} elements ({@code Communicator.allReduce},
     * the convenience operation, ordered with the compute stream). In place only in jnccl.
     */
    ALL_REDUCE("all_reduce", Source.REDUCTION, Layout.WHOLE, n -> 2.0 * (n - 1) / n, Placements.IN_PLACE,
            Transports.NCCL,
            call -> call.comm().allReduce(call.recv().slice(0, call.shape().count()), call.op(), call.compute())),
    /**
     * Rank r gets the reduction of slot r of every rank's input ({@code Transaction.reduceScatter}, in
     * place: the result lands in the rank's own slot). In place only in jnccl.
     */
    REDUCE_SCATTER("reduce_scatter", Source.REDUCTION, Layout.INPUT_SLOTS, n -> (n - 1) / (double) n,
            Placements.IN_PLACE, Transports.NCCL,
            transaction((call, tx) -> tx.reduceScatter(call.recv().slice(0, call.shape().send()), call.op()))),
    /**
     * Every rank's {@code count} elements land in every rank's output, in that rank's slot
     * ({@code Transaction.allGather}; in place from the rank's own slot of the output).
     */
    ALL_GATHER("all_gather", Source.SLOT, Layout.OUTPUT_SLOTS, n -> (n - 1) / (double) n,
            Placements.BOTH, Transports.NCCL_AND_MEMCPY,
            transaction((call, tx) -> {
                long count = call.shape().count();
                DeviceTensor full = call.recv().slice(0, call.shape().recv());
                tx.allGather(call.inPlace() ? full.slice(call.comm().rank() * count, count)
                        : call.send().slice(0, count), full);
            })),
    /**
     * A ring: every rank sends its {@code count} elements to rank (r+1) % n and receives rank
     * (r-1) % n's, in one transaction ({@code Transaction.send} + {@code recv}); with one rank it
     * sends to itself. In place sends and receives through the same buffer; like nccl-tests, those
     * results are not checked.
     */
    SEND_RECV("sendrecv", Source.PREVIOUS_RANK, Layout.WHOLE, n -> 1,
            Placements.BOTH_IN_PLACE_UNCHECKED, Transports.NCCL_AND_MEMCPY,
            transaction((call, tx) -> {
                int rank = call.comm().rank();
                int ranks = call.comm().worldSize();
                DeviceTensor recv = call.recv().slice(0, call.shape().count());
                tx.send(call.inPlace() ? recv : call.send().slice(0, call.shape().count()), (rank + 1) % ranks);
                tx.recv(recv, (rank - 1 + ranks) % ranks);
            })),
    /**
     * Slot {@code j} of every rank's input goes to rank {@code j}, slot {@code i} of the output comes
     * from rank {@code i} ({@code Transaction.allToAll}). In place runs jnccl's in-place form,
     * {@code destructiveAllToAll} (another slot layout), unchecked like nccl-tests' in-place alltoall.
     */
    ALL_TO_ALL("alltoall", Source.SLOT, Layout.BOTH_SLOTS, n -> (n - 1) / (double) n,
            Placements.BOTH_IN_PLACE_UNCHECKED, Transports.NCCL_AND_MEMCPY,
            transaction((call, tx) -> {
                DeviceTensor recv = call.recv().slice(0, call.shape().recv());
                if (call.inPlace()) {
                    tx.destructiveAllToAll(recv);
                } else {
                    tx.allToAll(call.send().slice(0, call.shape().recv()), recv);
                }
            })),
    /**
     * The root's ({@code -r}) {@code count} elements land in every rank's buffer
     * ({@code Transaction.broadcast}). In place only in jnccl.
     */
    BROADCAST("broadcast", Source.ROOT, Layout.WHOLE, n -> 1,
            Placements.IN_PLACE, Transports.NCCL,
            transaction((call, tx) -> tx.broadcast(call.recv().slice(0, call.shape().count()), call.root())));

    /** Marks {@link #sourceRank}: the output element is the reduction of every rank's input at the index. */
    static final int ALL_RANKS = -1;

    /** Where a checked output element comes from. */
    private enum Source {
        /** Every rank's input at the index, reduced with {@code -o}. */
        REDUCTION,
        /** The rank whose slot of the output holds the element. */
        SLOT,
        /** The previous rank of the ring. */
        PREVIOUS_RANK,
        /** The root, {@code -r}. */
        ROOT
    }

    /**
     * Which buffers hold one slot of nccl-tests' {@code count} per rank (the others hold one
     * {@code count}): this is nccl-tests' size convention. With slots, {@code count} is the size's
     * share of one rank, rounded down to 16 bytes; without, the whole size.
     */
    private enum Layout {
        WHOLE(false, false),
        INPUT_SLOTS(true, false),
        OUTPUT_SLOTS(false, true),
        BOTH_SLOTS(true, true);

        final boolean input;
        final boolean output;

        Layout(boolean input, boolean output) {
            this.input = input;
            this.output = output;
        }
    }

    /** The placements jnccl's API has and the benchmark checks. */
    private enum Placements {
        /** In place only: the out-of-place columns stay empty, as nccl-tests prints them. */
        IN_PLACE,
        /** Out of place and in place, both checked. */
        BOTH,
        /** Out of place and in place; in place unchecked ({@code N/A}), as nccl-tests reports it. */
        BOTH_IN_PLACE_UNCHECKED
    }

    /** The transports ({@code --transport}) an operation runs on. */
    private enum Transports {
        NCCL(Set.of("nccl")),
        /** Threads mode has a memcpy path for the operation. */
        NCCL_AND_MEMCPY(Set.of("nccl", "memcpy"));

        final Set<String> names;

        Transports(Set<String> names) {
            this.names = names;
        }
    }

    private final String ncclTestsName;
    private final Source source;
    private final Layout layout;
    private final IntToDoubleFunction busFactor;
    private final Placements placements;
    private final Transports transports;
    private final Issue issue;

    CollectiveOp(String ncclTestsName, Source source, Layout layout, IntToDoubleFunction busFactor,
                 Placements placements, Transports transports, Issue issue) {
        this.ncclTestsName = ncclTestsName;
        this.source = source;
        this.layout = layout;
        this.busFactor = busFactor;
        this.placements = placements;
        this.transports = transports;
        this.issue = issue;
    }

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

    /** The buffers and settings of one call. */
    record Call(Communicator comm, DeviceTensor send, DeviceTensor recv, Shape shape, BenchType type, ReduceOp op,
                int root, boolean inPlace, CudaStream compute, CudaEvent ready) {}

    /** How jnccl issues the operation once. */
    @FunctionalInterface
    private interface Issue {
        void enqueue(Call call);
    }

    /** An operation issued as one transaction after {@code call.ready()}, executed without a signal event. */
    private static Issue transaction(BiConsumer<Call, Transaction> body) {
        return call -> {
            try (Transaction tx = call.comm().begin(call.ready())) {
                body.accept(call, tx);
                tx.execute(null);
            }
        };
    }

    /** The operation named {@code name} (nccl-tests' name); a clear error for an unknown one. */
    static CollectiveOp byName(String name) {
        return Arrays.stream(values()).filter(op -> op.ncclTestsName.equals(name)).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("unknown operation '" + name + "' (known: "
                        + String.join(", ", names()) + ")"));
    }

    /** nccl-tests' names of the operations, in the order the usage lists them. */
    static List<String> names() {
        return Arrays.stream(values()).map(CollectiveOp::ncclTestsName).toList();
    }

    /** nccl-tests' name of the operation, e.g. {@code all_reduce}. */
    String ncclTestsName() {
        return ncclTestsName;
    }

    /** Whether the operation reduces (then inputs are reduction test values, else raw bits). */
    boolean reduces() {
        return source == Source.REDUCTION;
    }

    /**
     * Whether the {@code redop} column names {@code -o} (and {@code -o all} repeats the sizes per
     * operation): the reductions, and sendrecv, whose nccl-tests program prints (and loops over)
     * {@code -o} though nothing is reduced.
     */
    boolean redopColumn() {
        return reduces() || this == SEND_RECV;
    }

    /** Whether the operation has a root ({@code -r}); otherwise the {@code root} column is -1. */
    boolean rooted() {
        return source == Source.ROOT;
    }

    /** Transports it can run on: {@code nccl}, and {@code memcpy} where threads mode has a memcpy path. */
    Set<String> transports() {
        return transports.names;
    }

    /** nccl-tests' shape for {@code bytes} of the type on {@code ranks} ranks. */
    Shape shape(long bytes, BenchType type, int ranks) {
        if (layout == Layout.WHOLE) {
            long count = bytes / type.size();
            return new Shape(count, count, count);
        }
        long perRank = bytes / type.size() / ranks;
        long count = perRank - perRank % Math.max(1, 16 / type.size());
        return new Shape(count, layout.input ? count * ranks : count, layout.output ? count * ranks : count);
    }

    /** nccl-tests' bus-bandwidth factor: busbw = algbw * factor. */
    double busFactor(int ranks) {
        return busFactor.applyAsDouble(ranks);
    }

    /** Whether jnccl's API has an out-of-place form (else those columns stay empty, as nccl-tests prints them). */
    boolean outOfPlace() {
        return placements != Placements.IN_PLACE;
    }

    /** Whether in-place results are checked (nccl-tests reports {@code N/A} for sendrecv and alltoall). */
    boolean checksInPlace() {
        return placements != Placements.BOTH_IN_PLACE_UNCHECKED;
    }

    /** Whether rank {@code rank} provides input (only the root of a rooted operation; every rank otherwise). */
    boolean hasInput(int rank, int root) {
        return !rooted() || rank == root;
    }

    /**
     * Where rank {@code rank}'s input starts: in the send buffer out of place, in the receive buffer
     * in place, where an operation with output slots only (all_gather) takes it from the rank's own slot.
     */
    long inputOffset(Shape shape, int rank, boolean inPlace) {
        return inPlace && layout == Layout.OUTPUT_SLOTS ? rank * shape.count() : 0;
    }

    /**
     * The checked output of rank {@code rank}, its first element in the receive buffer: an operation
     * with input slots only (reduce_scatter, in place) leaves it in the rank's own slot.
     */
    long outputOffset(Shape shape, int rank) {
        return layout == Layout.INPUT_SLOTS ? rank * shape.count() : 0;
    }

    /** The rank whose input output element {@code i} holds, or {@link #ALL_RANKS} for a reduction. */
    int sourceRank(Shape shape, int rank, int ranks, int root, long i) {
        return switch (source) {
            case REDUCTION -> ALL_RANKS;
            case SLOT -> (int) (i / shape.count());
            case PREVIOUS_RANK -> (rank - 1 + ranks) % ranks;
            case ROOT -> root;
        };
    }

    /** The input index output element {@code i} holds: its place in its output slot, in this rank's input slot. */
    long sourceIndex(Shape shape, int rank, long i) {
        long inSlot = layout.output ? i % shape.count() : i;
        return layout.input ? rank * shape.count() + inSlot : inSlot;
    }

    /**
     * Enqueues the operation once on the comms stream (after {@code call.ready()}, or ordered with
     * {@code call.compute()} for convenience operations). Returns at once.
     */
    void enqueue(Call call) {
        issue.enqueue(call);
    }
}
