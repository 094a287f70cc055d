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
     * the convenience operation, ordered with the compute stream; out of place from the send buffer).
     */
    ALL_REDUCE("all_reduce", Source.REDUCTION, Layout.WHOLE, n -> 2.0 * (n - 1) / n, Placements.BOTH, Root.NONE,
            Transports.NCCL,
            call -> {
                DeviceTensor recv = call.recv().slice(0, call.shape().count());
                if (call.inPlace()) {
                    call.comm().allReduce(recv, call.op(), call.compute());
                } else {
                    call.comm().allReduce(call.send().slice(0, call.shape().count()), recv, call.op(), call.compute());
                }
            }),
    /**
     * Rank r gets the reduction of slot r of every rank's input ({@code Transaction.reduceScatter}; in
     * place the result lands in the rank's own slot, out of place at the start of the receive buffer).
     */
    REDUCE_SCATTER("reduce_scatter", Source.REDUCTION, Layout.INPUT_SLOTS, n -> (n - 1) / (double) n,
            Placements.BOTH, Root.NONE, Transports.NCCL,
            transaction((call, tx) -> {
                if (call.inPlace()) {
                    tx.reduceScatter(call.recv().slice(0, call.shape().send()), call.op());
                } else {
                    tx.reduceScatter(call.send().slice(0, call.shape().send()),
                            call.recv().slice(0, call.shape().count()), call.op());
                }
            })),
    /**
     * Every rank's {@code count} elements land in every rank's output, in that rank's slot
     * ({@code Transaction.allGather}; in place from the rank's own slot of the output).
     */
    ALL_GATHER("all_gather", Source.SLOT, Layout.OUTPUT_SLOTS, n -> (n - 1) / (double) n,
            Placements.BOTH, Root.NONE, Transports.NCCL_AND_MEMCPY,
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
            Placements.BOTH_IN_PLACE_UNCHECKED, Root.NONE, Transports.NCCL_AND_MEMCPY,
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
            Placements.BOTH_IN_PLACE_UNCHECKED, Root.NONE, Transports.NCCL_AND_MEMCPY,
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
     * ({@code Transaction.broadcast}; out of place from the root's send buffer).
     */
    BROADCAST("broadcast", Source.ROOT, Layout.WHOLE, n -> 1, Placements.BOTH, Root.INPUT, Transports.NCCL,
            transaction((call, tx) -> {
                DeviceTensor recv = call.recv().slice(0, call.shape().count());
                if (call.inPlace()) {
                    tx.broadcast(recv, call.root());
                } else {
                    tx.broadcast(call.send().slice(0, call.shape().count()), recv, call.root());
                }
            })),
    /**
     * The root ({@code -r}) gets the reduction of all ranks' {@code count} elements
     * ({@code Transaction.reduce}; out of place the other ranks pass no receive buffer). nccl-tests'
     * reduce_perf: algbw = size / time, busbw = algbw.
     */
    REDUCE("reduce", Source.REDUCTION, Layout.WHOLE, n -> 1, Placements.BOTH, Root.OUTPUT, Transports.NCCL,
            transaction((call, tx) -> {
                DeviceTensor recv = call.recv().slice(0, call.shape().count());
                boolean root = call.comm().rank() == call.root();
                tx.reduce(call.inPlace() ? recv : call.send().slice(0, call.shape().count()),
                        root || call.inPlace() ? recv : null, call.op(), call.root());
            })),
    /**
     * Every rank's {@code count} elements land in the root's output, in that rank's slot
     * ({@code Transaction.gather}; in place from the rank's own slot of the output, and the other
     * ranks pass no output). nccl-tests' gather_perf: algbw = size / time, busbw = algbw * (n-1)/n.
     */
    GATHER("gather", Source.SLOT, Layout.OUTPUT_SLOTS, n -> (n - 1) / (double) n, Placements.BOTH, Root.OUTPUT,
            Transports.NCCL,
            transaction((call, tx) -> {
                long count = call.shape().count();
                DeviceTensor full = call.recv().slice(0, call.shape().recv());
                int rank = call.comm().rank();
                tx.gather(call.inPlace() ? full.slice(rank * count, count) : call.send().slice(0, count),
                        rank == call.root() ? full : null, call.root());
            })),
    /**
     * Slot r of the root's input lands in rank r's output ({@code Transaction.scatter}; in place into
     * the rank's own slot of the receive buffer, which holds the input; the other ranks pass no
     * input). nccl-tests' scatter_perf: algbw = size / time, busbw = algbw * (n-1)/n.
     */
    SCATTER("scatter", Source.ROOT, Layout.INPUT_SLOTS, n -> (n - 1) / (double) n, Placements.BOTH, Root.INPUT,
            Transports.NCCL,
            transaction((call, tx) -> {
                long count = call.shape().count();
                boolean root = call.comm().rank() == call.root();
                DeviceTensor input = (call.inPlace() ? call.recv() : call.send()).slice(0, call.shape().send());
                tx.scatter(root ? input : null, call.inPlace() ? input.slice(call.comm().rank() * count, count)
                        : call.recv().slice(0, count), call.root());
            })),
    /**
     * jnccl's uneven all-to-all ({@code Transaction.allToAll} with counts; no nccl-tests program):
     * rank p sends {@link #unevenCount} elements to rank q, blocks of 2 * count * w / (n + 1)
     * elements with w = (p + q) mod n + 1 (1 to n: zero-length blocks at small sizes), which fill
     * the n * count elements of alltoall's buffers up to rounding. Sizes, algbw and busbw as for
     * alltoall (algbw = size / time with size = n * count elements, busbw = algbw * (n-1)/n). Out of
     * place only: there is no in-place form.
     */
    ALL_TO_ALL_V("alltoallv", Source.UNEVEN, Layout.BOTH_SLOTS, n -> (n - 1) / (double) n, Placements.OUT_OF_PLACE,
            Root.NONE, Transports.NCCL,
            transaction((call, tx) -> {
                int ranks = call.comm().worldSize();
                int rank = call.comm().rank();
                long count = call.shape().count();
                long[] sendCounts = new long[ranks];
                long[] recvCounts = new long[ranks];
                for (int q = 0; q < ranks; q++) {
                    sendCounts[q] = unevenCount(count, ranks, rank, q);
                    recvCounts[q] = unevenCount(count, ranks, q, rank);
                }
                tx.allToAll(call.send().slice(0, call.shape().send()), sendCounts,
                        call.recv().slice(0, call.shape().recv()), recvCounts);
            }));

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
        ROOT,
        /** The rank whose block of the uneven all-to-all's output holds the element. */
        UNEVEN
    }

    /** What the root ({@code -r}) of a rooted operation is. */
    private enum Root {
        /** Not rooted: the {@code root} column is -1. */
        NONE,
        /** Only the root provides input (broadcast, scatter). */
        INPUT,
        /** Only the root's output is significant and checked (reduce, gather). */
        OUTPUT
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
        /** Out of place and in place, both checked. */
        BOTH,
        /** Out of place and in place; in place unchecked ({@code N/A}), as nccl-tests reports it. */
        BOTH_IN_PLACE_UNCHECKED,
        /** Out of place only: the in-place columns stay empty, as nccl-tests prints a null body. */
        OUT_OF_PLACE
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
    private final Root root;
    private final Transports transports;
    private final Issue issue;

    CollectiveOp(String ncclTestsName, Source source, Layout layout, IntToDoubleFunction busFactor,
                 Placements placements, Root root, Transports transports, Issue issue) {
        this.ncclTestsName = ncclTestsName;
        this.source = source;
        this.layout = layout;
        this.busFactor = busFactor;
        this.placements = placements;
        this.root = root;
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
        return root != Root.NONE;
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

    /** Whether jnccl's API has an in-place form (else those columns stay empty, as nccl-tests prints them). */
    boolean inPlace() {
        return placements != Placements.OUT_OF_PLACE;
    }

    /** Whether in-place results are checked (nccl-tests reports {@code N/A} for sendrecv and alltoall). */
    boolean checksInPlace() {
        return placements != Placements.BOTH_IN_PLACE_UNCHECKED;
    }

    /** Whether rank {@code rank} provides input (only the root of a rooted operation; every rank otherwise). */
    boolean hasInput(int rank, int root) {
        return this.root != Root.INPUT || rank == root;
    }

    /**
     * How many elements of rank {@code rank}'s output are checked: none on a rank other than the
     * root of reduce and gather, the blocks received by the uneven all-to-all, else the whole output.
     */
    long checkedCount(Shape shape, int rank, int ranks, int root) {
        if (this.root == Root.OUTPUT && rank != root) {
            return 0;
        }
        if (source == Source.UNEVEN) {
            long total = 0;
            for (int p = 0; p < ranks; p++) {
                total += unevenCount(shape.count(), ranks, p, rank);
            }
            return total;
        }
        return shape.recv();
    }

    /**
     * The elements rank {@code from} sends to rank {@code to} in the uneven all-to-all of
     * {@code count} per rank and pair on average: {@code 2 * count * ((from + to) mod n + 1) / (n + 1)},
     * so each rank's blocks sum to at most {@code n * count}.
     */
    static long unevenCount(long count, int ranks, int from, int to) {
        return 2 * count * ((from + to) % ranks + 1) / (ranks + 1);
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
     * with input slots only (reduce_scatter, scatter) leaves it in the rank's own slot in place.
     */
    long outputOffset(Shape shape, int rank, boolean inPlace) {
        return inPlace && layout == Layout.INPUT_SLOTS ? rank * shape.count() : 0;
    }

    /** The rank whose input output element {@code i} holds, or {@link #ALL_RANKS} for a reduction. */
    int sourceRank(Shape shape, int rank, int ranks, int root, long i) {
        return switch (source) {
            case REDUCTION -> ALL_RANKS;
            case SLOT -> (int) (i / shape.count());
            case PREVIOUS_RANK -> (rank - 1 + ranks) % ranks;
            case ROOT -> root;
            case UNEVEN -> {
                long start = 0;
                for (int p = 0; ; p++) {
                    start += unevenCount(shape.count(), ranks, p, rank);
                    if (i < start) {
                        yield p;
                    }
                }
            }
        };
    }

    /**
     * The input index output element {@code i} holds: its place in its output slot, in this rank's
     * input slot (for the uneven all-to-all: its place in its block, in the source's block for this rank).
     */
    long sourceIndex(Shape shape, int rank, int ranks, long i) {
        if (source == Source.UNEVEN) {
            long start = 0;
            int from = 0;
            while (i >= start + unevenCount(shape.count(), ranks, from, rank)) {
                start += unevenCount(shape.count(), ranks, from, rank);
                from++;
            }
            long block = 0;
            for (int q = 0; q < rank; q++) {
                block += unevenCount(shape.count(), ranks, from, q);
            }
            return block + i - start;
        }
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
