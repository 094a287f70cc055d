package dev.jnccl;

import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.spi.Command.Kind;
import dev.jnccl.spi.Command.Shape;

/**
 * A group of communication commands that runs as one unit on the communicator's comms stream:
 * after the "ready" event given to {@link Communicator#begin}, and before the "signal" event given
 * to {@link #execute}. Commands are checked when added, before anything native happens.
 *
 * <p>Use it once, from the thread that began it (any other thread gets an
 * {@link IllegalStateException} naming both threads): add commands, {@link #execute} it, or
 * {@link #close} it without executing to discard it. Closing after execute does nothing, so
 * try-with-resources fits.
 *
 * <p>It is a handle of the communicator's open transaction, which keeps the commands in storage it
 * reuses: making and filling a transaction allocates nothing in steady state. A handle kept after
 * its transaction was executed or closed says so when used, and never reaches a later transaction.
 */
public final class Transaction implements AutoCloseable {
    // A thin handle: the commands and the open/closed state live in the communicator's
    // transaction log (one transaction is open at a time), so a transaction allocates nothing per
    // call, and a handle used after its transaction ended (executed or closed) says so by its
    // number, never adding to a later transaction. Every command goes through add(..), which takes
    // no handle: in a begin(..).x(..).execute(..) chain the JIT can scalar-replace it.

    private final Communicator communicator;
    private final TransactionLog log;
    private final Checks checks;
    /** The transaction's number, or {@link #CURRENT} for the communicator's own use. */
    private final long number;

    /** The {@link #number} of a handle that always means the transaction open now (never given to users). */
    static final long CURRENT = 0;

    Transaction(Communicator communicator, TransactionLog log, Checks checks, long number) {
        this.communicator = communicator;
        this.log = log;
        this.checks = checks;
        this.number = number;
    }

    /**
     * In-place reduce-scatter (sum) of {@code tensor}: this rank's shard receives the sum over all ranks.
     *
     * @param tensor the tensor, world size times the shard
     * @return this transaction
     */
    public Transaction reduceScatter(DeviceTensor tensor) {
        return reduceScatter(tensor, ReduceOp.SUM);
    }

    /**
     * In-place reduce-scatter of {@code tensor} with {@code op}: this rank's shard receives the reduction.
     *
     * @param tensor the tensor, world size times the shard
     * @param op the reduction
     * @return this transaction
     */
    public Transaction reduceScatter(DeviceTensor tensor, ReduceOp op) {
        add(log, checks, number, Kind.REDUCE_SCATTER, true, tensor, tensor, op, 0);
        return this;
    }
    /**
     * All-gather: every rank's {@code shard} lands in {@code full} at that rank's index. In place when {@code shard} is this rank's shard of {@code full}.
     *
     * @param shard this rank's shard
     * @param full the gathered tensor (world size times the shard)
     * @return this transaction
     */
    public Transaction allGather(DeviceTensor shard, DeviceTensor full) {
        add(log, checks, number, Kind.ALL_GATHER, false, shard, full, null, 0);
        return this;
    }
    /**
     * Destructive all-to-all of {@code tensor}'s world-size slots; which slot holds which rank's
     * shard afterwards (and which one is stale) is documented in {@link AllToAllSchedule}.
     *
     * @param tensor the tensor, world size slots
     * @return this transaction
     */
    public Transaction destructiveAllToAll(DeviceTensor tensor) {
        add(log, checks, number, Kind.DESTRUCTIVE_ALL_TO_ALL, true, tensor, tensor, null, 0);
        return this;
    }
    /**
     * All-to-all from {@code send} into {@code recv} (non-destructive): slot {@code j} of
     * {@code send} (world size equal slots) goes to rank {@code j}, and slot {@code i} of
     * {@code recv} receives what rank {@code i} sent to this rank, so slot {@code rank} is a copy of
     * this rank's own slot. Runs as {@code ncclAlltoAll} where the loaded NCCL has it (2.28+), as
     * grouped send/recv otherwise, and through the memcpy send/recv transport where threads mode
     * uses it; always after the transaction's other commands, in an NCCL group of its own, so its
     * messages never pair with the transaction's {@link #send}s and {@link #recv}s. The tensors must
     * not overlap (use {@link #destructiveAllToAll} to work in place).
     *
     * @param send this rank's slots, one per destination rank
     * @param recv where the slots from every rank land, in rank order
     * @return this transaction
     * @throws IllegalArgumentException for different dtypes or sizes, a size not divisible by the
     *                                  world size, or overlapping tensors
     */
    public Transaction allToAll(DeviceTensor send, DeviceTensor recv) {
        add(log, checks, number, Kind.ALL_TO_ALL, false, send, recv, null, 0);
        return this;
    }
    /**
     * In-place broadcast: every rank's {@code tensor} receives the contents of {@code root}'s
     * (all ranks pass tensors of the same size and dtype).
     *
     * @param tensor the tensor (the source on {@code root})
     * @param root the rank whose tensor is broadcast, in {@code [0, worldSize)}
     * @return this transaction
     * @throws IllegalArgumentException for a root out of range
     */
    public Transaction broadcast(DeviceTensor tensor, int root) {
        add(log, checks, number, Kind.BROADCAST, true, tensor, tensor, null, root);
        return this;
    }
    /**
     * In-place all-reduce of {@code tensor} with {@code op}: every rank receives the reduction.
     *
     * @param tensor the tensor
     * @param op the reduction
     * @return this transaction
     */
    public Transaction allReduce(DeviceTensor tensor, ReduceOp op) {
        add(log, checks, number, Kind.ALL_REDUCE, true, tensor, tensor, op, 0);
        return this;
    }
    /**
     * Sends {@code tensor} to {@code peer}; the peer must post a matching {@link #recv}. The peer
     * may be this rank (a local copy, matched by a {@link #recv} from this rank in the same
     * transaction), so ring code written for any world size works at world 1.
     *
     * @param tensor what is sent
     * @param peer the receiving rank, in {@code [0, worldSize)}
     * @return this transaction
     */
    public Transaction send(DeviceTensor tensor, int peer) {
        add(log, checks, number, Kind.SEND, true, tensor, tensor, null, peer);
        return this;
    }
    /**
     * Receives into {@code tensor} from {@code peer}; the peer must post a matching {@link #send}.
     * The peer may be this rank (see {@link #send}).
     *
     * @param tensor where the message lands
     * @param peer the sending rank, in {@code [0, worldSize)}
     * @return this transaction
     */
    public Transaction recv(DeviceTensor tensor, int peer) {
        add(log, checks, number, Kind.RECV, true, tensor, tensor, null, peer);
        return this;
    }
    // ---------------------------------------------------------------- out of place, rooted, uneven

    /**
     * All-reduce of {@code src} into {@code dst} with {@code op}: every rank's {@code dst} receives
     * the reduction over all ranks' {@code src}. The same tensor for both is the in-place
     * {@link #allReduce(DeviceTensor, ReduceOp)}; tensors that overlap otherwise are refused.
     *
     * @param src this rank's contribution (unchanged when out of place)
     * @param dst the result, the dtype and count of {@code src}
     * @param op the reduction
     * @return this transaction
     * @throws IllegalArgumentException for different dtypes or counts, a dtype that cannot be
     *                                  reduced, or partially overlapping tensors
     */
    public Transaction allReduce(DeviceTensor src, DeviceTensor dst, ReduceOp op) {
        add(log, checks, number, Kind.ALL_REDUCE, false, src, dst, op, 0);
        return this;
    }
    /**
     * Reduce-scatter of {@code src} into {@code dst} with {@code op}: {@code dst} receives the
     * reduction of shard {@code rank} of every rank's {@code src}. In place (as
     * {@link #reduceScatter(DeviceTensor, ReduceOp)}) when {@code dst} is this rank's shard of
     * {@code src} (NCCL's rule: {@code dst} at {@code src + rank * dst.count()}); tensors that
     * overlap otherwise are refused.
     *
     * @param src this rank's contribution, world size times {@code dst}'s count
     * @param dst this rank's reduced shard
     * @param op the reduction
     * @return this transaction
     * @throws IllegalArgumentException for different dtypes, {@code src} not world size times
     *                                  {@code dst}, a dtype that cannot be reduced, or partially
     *                                  overlapping tensors
     */
    public Transaction reduceScatter(DeviceTensor src, DeviceTensor dst, ReduceOp op) {
        add(log, checks, number, Kind.REDUCE_SCATTER, false, src, dst, op, 0);
        return this;
    }
    /**
     * Broadcast of {@code root}'s {@code src} into every rank's {@code dst}. Every rank passes both
     * tensors ({@code src} is read on the root only). The same tensor for both is the in-place
     * {@link #broadcast(DeviceTensor, int)}; tensors that overlap otherwise are refused.
     *
     * @param src the source (read on {@code root})
     * @param dst where the root's source lands, the dtype and count of {@code src}
     * @param root the rank whose {@code src} is broadcast, in {@code [0, worldSize)}
     * @return this transaction
     * @throws IllegalArgumentException for a root out of range, different dtypes or counts, or
     *                                  partially overlapping tensors
     */
    public Transaction broadcast(DeviceTensor src, DeviceTensor dst, int root) {
        add(log, checks, number, Kind.BROADCAST, false, src, dst, null, root);
        return this;
    }
    /**
     * Reduce: {@code root}'s {@code dst} receives the reduction with {@code op} over all ranks'
     * {@code src} ({@code ncclReduce}). {@code dst} is significant on the root only: other ranks
     * may pass {@code null} (a tensor they pass is checked like the root's and left unchanged).
     * In place on the root when {@code dst} is {@code src}; tensors that overlap otherwise are
     * refused there.
     *
     * @param src this rank's contribution
     * @param dst the result on the root, the dtype and count of {@code src}; may be null elsewhere
     * @param op the reduction
     * @param root the rank that receives the result, in {@code [0, worldSize)}
     * @return this transaction
     * @throws IllegalArgumentException for a root out of range, a null {@code dst} on the root,
     *                                  different dtypes or counts, a dtype that cannot be
     *                                  reduced, or partially overlapping tensors on the root
     */
    public Transaction reduce(DeviceTensor src, DeviceTensor dst, ReduceOp op, int root) {
        add(log, checks, number, Kind.REDUCE, false, src, dst, op, root);
        return this;
    }
    /**
     * Gather: every rank's {@code src} lands in {@code root}'s {@code dst} at the rank's index
     * ({@code ncclGather} where the loaded NCCL has it, 2.28+, else a send to the root and, on the
     * root, a receive per rank). {@code dst} is significant on the root only: other ranks may pass
     * {@code null} (a tensor they pass is checked like the root's and left unchanged). In place on
     * the root when {@code src} is the root's slot of {@code dst} (NCCL's rule: {@code src} at
     * {@code dst + root * src.count()}); tensors that overlap otherwise are refused there. Runs
     * after the transaction's other commands, in an NCCL group of its own, like {@link #allToAll}:
     * its messages never pair with the transaction's sends and receives.
     *
     * @param src this rank's contribution
     * @param dst world size times {@code src}'s count on the root; may be null elsewhere
     * @param root the receiving rank, in {@code [0, worldSize)}
     * @return this transaction
     * @throws IllegalArgumentException for a root out of range, a null {@code dst} on the root,
     *                                  different dtypes, {@code dst} not world size times
     *                                  {@code src}, or partially overlapping tensors on the root
     */
    public Transaction gather(DeviceTensor src, DeviceTensor dst, int root) {
        add(log, checks, number, Kind.GATHER, false, src, dst, null, root);
        return this;
    }
    /**
     * Scatter: slot {@code rank} of {@code root}'s {@code src} lands in every rank's {@code dst}
     * ({@code ncclScatter} where the loaded NCCL has it, 2.28+, else, on the root, a send per rank
     * and a receive from the root). {@code src} is significant on the root only: other ranks may
     * pass {@code null} (a tensor they pass is checked like the root's and left unchanged). In
     * place on the root when {@code dst} is the root's slot of {@code src} (NCCL's rule:
     * {@code dst} at {@code src + root * dst.count()}); tensors that overlap otherwise are refused
     * there. Runs after the transaction's other commands, in an NCCL group of its own, like
     * {@link #allToAll}.
     *
     * @param src world size times {@code dst}'s count on the root; may be null elsewhere
     * @param dst this rank's slot
     * @param root the sending rank, in {@code [0, worldSize)}
     * @return this transaction
     * @throws IllegalArgumentException for a root out of range, a null {@code src} on the root,
     *                                  different dtypes, {@code src} not world size times
     *                                  {@code dst}, or partially overlapping tensors on the root
     */
    public Transaction scatter(DeviceTensor src, DeviceTensor dst, int root) {
        add(log, checks, number, Kind.SCATTER, false, src, dst, null, root);
        return this;
    }
    /**
     * Uneven all-to-all: this rank sends {@code sendCounts[q]} elements to rank {@code q} and
     * receives {@code recvCounts[p]} elements from rank {@code p}; the block for rank {@code q}
     * starts at the sum of the counts before {@code q} (in {@code send}, and likewise in
     * {@code recv}). Each rank's {@code recvCounts[p]} must equal rank {@code p}'s
     * {@code sendCounts[rank]} (a mismatch is NCCL's error: the communicator aborts); this rank's
     * own entries must be equal, which is checked here. The arrays are copied: changing them later
     * changes nothing. Runs as grouped send/recv (ranks with a zero count skipped), after the
     * transaction's other commands, in an NCCL group of its own, like {@link #allToAll}. The
     * tensors must not overlap.
     *
     * @param send the blocks for every rank, in rank order
     * @param sendCounts elements for each rank: world size entries, each at least 0, summing to at
     *                   most {@code send}'s count
     * @param recv where the blocks from every rank land, in rank order
     * @param recvCounts elements from each rank: world size entries, each at least 0, summing to
     *                   at most {@code recv}'s count
     * @return this transaction
     * @throws IllegalArgumentException for different dtypes, counts of the wrong length, a
     *                                  negative count, counts summing past a tensor, different
     *                                  own counts, or overlapping tensors
     */
    public Transaction allToAll(DeviceTensor send, long[] sendCounts, DeviceTensor recv, long[] recvCounts) {
        addCounted(log, checks, number, Kind.UNEVEN_ALL_TO_ALL, send, sendCounts, recv, recvCounts);
        return this;
    }
    /**
     * Uneven all-gather: rank {@code p} contributes {@code counts[p]} elements, which land in every
     * rank's {@code full} after the blocks of the ranks before it (the blocks in rank order from
     * {@code full}'s start). This rank's {@code shard} holds its own {@code counts[rank]} elements;
     * every rank must pass the same counts (a difference is NCCL's error or hang; under
     * {@code jnccl.debug=detail} and on the host emulation it is named). Runs as one
     * {@code ncclBroadcast} per rank with a non-empty block, grouped, after the transaction's other
     * commands in an NCCL group of its own (as Megatron and vLLM build it on NCCL). In place when
     * {@code shard} is this rank's block of {@code full}; otherwise they must not overlap. The array
     * is copied: changing it later changes nothing.
     *
     * @param shard this rank's block: {@code counts[rank]} elements
     * @param full where every rank's block lands, in rank order
     * @param counts elements of each rank: world size entries, each at least 0, summing to at most
     *               {@code full}'s count
     * @return this transaction
     * @throws IllegalArgumentException for different dtypes, counts of the wrong length, a negative
     *                                  count, counts summing past {@code full}, {@code counts[rank]}
     *                                  other than {@code shard}'s count, or overlapping tensors
     *                                  that are not in place
     */
    public Transaction allGather(DeviceTensor shard, DeviceTensor full, long[] counts) {
        addCounted(log, checks, number, Kind.ALL_GATHER_V, shard, null, full, counts);
        return this;
    }

    /**
     * The one way a command enters a transaction (the convenience operations' too): through handle
     * {@code number} of the open transaction, checked from its kind's row before anything native
     * happens, then buffered. Static, taking no handle: a user's handle escapes into nothing, so in
     * a chain of calls the JIT can scalar-replace it however little of this it inlines.
     *
     * @param single whether the caller passed one tensor ({@code src == dst}, named "tensor")
     */
    static void add(TransactionLog log, Checks checks, long number, Kind kind, boolean single, DeviceTensor src,
                    DeviceTensor dst, ReduceOp op, int target) {
        log.requireOpen(kind.method(), number);
        checks.command(kind, single, src, dst, op, target);
        log.commands().add(kind, src, dst, op, target, null, null);
    }

    /**
     * {@link #add} for a counted kind: the counts are checked on scratch copies (another thread may
     * change the caller's arrays meanwhile), reused from call to call; a new command copies them.
     *
     * @param sendCounts null for {@link Shape#BLOCKS}, whose counts are {@code recvCounts}
     */
    static void addCounted(TransactionLog log, Checks checks, long number, Kind kind, DeviceTensor src,
                           long[] sendCounts, DeviceTensor dst, long[] recvCounts) {
        String operation = kind.method();
        log.requireOpen(operation, number);
        CommandBuffer buffer = log.commands();
        checks.requireUsable(operation, kind.srcName(), src);
        checks.requireUsable(operation, kind.dstName(), dst);
        boolean blocks = kind.shape() == Shape.BLOCKS; // one count per rank, no send counts
        long[] sends = blocks ? null : checks.countsCopy(operation, "sendCounts", sendCounts, buffer, 0);
        long[] recvs = checks.countsCopy(operation, blocks ? "counts" : "recvCounts", recvCounts, buffer, 1);
        checks.counted(kind, src, sends, dst, recvs);
        checks.checkSupported(operation, src.dtype());
        buffer.add(kind, src, dst, null, -1, sends, recvs);
    }

    /**
     * Enqueues the commands on the comms stream, after the ready event, as one NCCL group (then each
     * all-to-all in command order: a plain one as a group of its own, a destructive one as its
     * ordered rounds), then records {@code signal} (may be null). An
     * empty transaction still orders {@code signal} after the ready event. Returns at once: the
     * work runs asynchronously on the GPU.
     *
     * <p>If NCCL fails after the group was opened, the group is closed, the communicator is
     * aborted, and the exception is thrown; if the failure comes before (e.g. a CUDA error waiting
     * for the ready event), nothing was enqueued and the communicator stays usable.
     *
     * @param signal recorded on the comms stream after the commands (may be null)
     */
    public void execute(CudaEvent signal) {
        execute(log, communicator, number, signal);
    }

    /** {@link #execute(CudaEvent)} through handle {@code number}; static for the reason {@link #add} is. */
    private static void execute(TransactionLog log, Communicator communicator, long number, CudaEvent signal) {
        log.requireOpen("execute", number);
        if (signal != null && signal.isClosed()) {
            throw new IllegalStateException("execute: signal event " + signal + " is closed");
        }
        communicator.execute(signal);
    }

    /** Discards the transaction if it was not executed; otherwise does nothing. */
    @Override
    public void close() {
        log.discard(number);
    }

    /**
     * The number of commands added so far (and not yet executed or discarded): a rejected command
     * is never added.
     *
     * @return the number of commands in the transaction
     */
    public int size() {
        return isOpen() ? log.commands().size() : 0;
    }

    /** {@return the sequence number of this transaction on its communicator (1, 2, ...)} */
    public long number() {
        return number == CURRENT ? log.openNumber() : number;
    }

    /**
     * Whether commands can still be added (neither executed nor closed).
     *
     * @return whether the transaction is open
     */
    public boolean isOpen() {
        return log.isOpen(number);
    }

    /** {@return the commands so far (tests look at what the checks made)} */
    CommandBuffer buffer() {
        return log.commands();
    }

    @Override
    public String toString() {
        return "Transaction#" + number() + "[rank " + communicator.rank() + ", "
                + (isOpen() ? "OPEN, " + log.commands() : log.outcome(number())) + "]";
    }
}
