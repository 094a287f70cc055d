package dev.jnccl;

import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.spi.Command;
import java.util.Objects;

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
    // A thin handle: the commands and the open/closed state live in the communicator (one
    // transaction is open at a time), so a transaction allocates nothing per call, and a handle
    // used after its transaction ended (executed or closed) says so by its number, never adding
    // to a later transaction. In a begin(..).x(..).execute(..) chain the JIT can scalar-replace it.

    private final Communicator communicator;
    private final Checks checks;
    /** The transaction's number, or {@link #CURRENT} for the communicator's own handle of its convenience operations. */
    private final long number;

    /** The {@link #number} of the handle that always means the transaction open now (never given to users). */
    static final long CURRENT = 0;

    Transaction(Communicator communicator, long number) {
        this.communicator = communicator;
        this.checks = communicator.checks();
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
        handle("reduceScatter").addReduceScatter(tensor, op);
        return this;
    }

    /** Checks and adds {@link #reduceScatter(DeviceTensor, ReduceOp)} (on the communicator's own handle). */
    void addReduceScatter(DeviceTensor tensor, ReduceOp op) {
        requireTensor("reduceScatter", "tensor", tensor);
        Objects.requireNonNull(op, "reduceScatter: op is null");
        checks.checkReducible("reduceScatter", tensor.dtype(), op);
        requireDivisible("reduceScatter", tensor);
        commands().reduceScatter(tensor, op);
    }

    /**
     * All-gather: every rank's {@code shard} lands in {@code full} at that rank's index. In place when {@code shard} is this rank's shard of {@code full}.
     *
     * @param shard this rank's shard
     * @param full the gathered tensor (world size times the shard)
     * @return this transaction
     */
    public Transaction allGather(DeviceTensor shard, DeviceTensor full) {
        handle("allGather").addAllGather(shard, full);
        return this;
    }

    /** Checks and adds {@link #allGather(DeviceTensor, DeviceTensor)} (on the communicator's own handle). */
    void addAllGather(DeviceTensor shard, DeviceTensor full) {
        requireTensor("allGather", "shard", shard);
        requireTensor("allGather", "full", full);
        if (shard.dtype() != full.dtype()) {
            throw new IllegalArgumentException("allGather: shard dtype " + shard.dtype() + " differs from full dtype "
                    + full.dtype());
        }
        int world = communicator.worldSize();
        if (full.count() != shard.count() * world) {
            throw new IllegalArgumentException("allGather: full has " + full.count() + " elements, expected shard "
                    + shard.count() + " x world size " + world + " = " + shard.count() * world);
        }
        checks.checkSupported("allGather", shard.dtype());
        commands().allGather(shard, full);
    }

    /**
     * Destructive all-to-all of {@code tensor}'s world-size slots; which slot holds which rank's
     * shard afterwards (and which one is stale) is documented in {@link AllToAllSchedule}.
     *
     * @param tensor the tensor, world size slots
     * @return this transaction
     */
    public Transaction destructiveAllToAll(DeviceTensor tensor) {
        handle("destructiveAllToAll").addDestructiveAllToAll(tensor);
        return this;
    }

    /** Checks and adds {@link #destructiveAllToAll(DeviceTensor)} (on the communicator's own handle). */
    void addDestructiveAllToAll(DeviceTensor tensor) {
        requireTensor("destructiveAllToAll", "tensor", tensor);
        checks.checkSupported("destructiveAllToAll", tensor.dtype());
        requireDivisible("destructiveAllToAll", tensor);
        commands().destructiveAllToAll(tensor);
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
        handle("allToAll").addAllToAll(send, recv);
        return this;
    }

    /** Checks and adds {@link #allToAll(DeviceTensor, DeviceTensor)} (on the communicator's own handle). */
    void addAllToAll(DeviceTensor send, DeviceTensor recv) {
        requireTensor("allToAll", "send", send);
        requireTensor("allToAll", "recv", recv);
        if (send.dtype() != recv.dtype()) {
            throw new IllegalArgumentException("allToAll: send dtype " + send.dtype() + " differs from recv dtype "
                    + recv.dtype());
        }
        if (send.count() != recv.count()) {
            throw new IllegalArgumentException("allToAll: send has " + send.count() + " elements but recv has "
                    + recv.count());
        }
        requireDivisible("allToAll", send);
        if (overlap(send, recv)) {
            throw new IllegalArgumentException("allToAll: send " + send + " and recv " + recv
                    + " overlap; use destructiveAllToAll for an in-place exchange");
        }
        checks.checkSupported("allToAll", send.dtype());
        commands().allToAll(send, recv);
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
        handle("broadcast").addBroadcast(tensor, root);
        return this;
    }

    /** Checks and adds {@link #broadcast(DeviceTensor, int)} (on the communicator's own handle). */
    void addBroadcast(DeviceTensor tensor, int root) {
        requireTensor("broadcast", "tensor", tensor);
        checks.checkRoot("broadcast", root);
        checks.checkSupported("broadcast", tensor.dtype());
        commands().broadcast(tensor, root);
    }

    /**
     * In-place all-reduce of {@code tensor} with {@code op}: every rank receives the reduction.
     *
     * @param tensor the tensor
     * @param op the reduction
     * @return this transaction
     */
    public Transaction allReduce(DeviceTensor tensor, ReduceOp op) {
        handle("allReduce").addAllReduce(tensor, op);
        return this;
    }

    /** Checks and adds {@link #allReduce(DeviceTensor, ReduceOp)} (on the communicator's own handle). */
    void addAllReduce(DeviceTensor tensor, ReduceOp op) {
        requireTensor("allReduce", "tensor", tensor);
        Objects.requireNonNull(op, "allReduce: op is null");
        checks.checkReducible("allReduce", tensor.dtype(), op);
        commands().allReduce(tensor, op);
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
        handle("send").addSend(tensor, peer);
        return this;
    }

    /** Checks and adds {@link #send(DeviceTensor, int)} (on the communicator's own handle). */
    void addSend(DeviceTensor tensor, int peer) {
        requireTensor("send", "tensor", tensor);
        checks.checkPeer("send", peer);
        checks.checkSupported("send", tensor.dtype());
        commands().send(tensor, peer);
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
        handle("recv").addRecv(tensor, peer);
        return this;
    }

    /** Checks and adds {@link #recv(DeviceTensor, int)} (on the communicator's own handle). */
    void addRecv(DeviceTensor tensor, int peer) {
        requireTensor("recv", "tensor", tensor);
        checks.checkPeer("recv", peer);
        checks.checkSupported("recv", tensor.dtype());
        commands().recv(tensor, peer);
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
        handle("allReduce").addAllReduce(src, dst, op);
        return this;
    }

    /** Checks and adds {@link #allReduce(DeviceTensor, DeviceTensor, ReduceOp)} (on the communicator's own handle). */
    void addAllReduce(DeviceTensor src, DeviceTensor dst, ReduceOp op) {
        requireTensor("allReduce", "src", src);
        requireTensor("allReduce", "dst", dst);
        Objects.requireNonNull(op, "allReduce: op is null");
        requireSameDtype("allReduce", src, dst);
        requireCount("allReduce", "dst", dst, src.count(), "src's count");
        checks.checkReducible("allReduce", src.dtype(), op);
        boolean inPlace = inPlaceOrApart("allReduce", src, dst, src.address(), "dst equal to src");
        if (inPlace) {
            commands().allReduce(dst, op);
        } else {
            commands().allReduce(src, dst, op);
        }
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
        handle("reduceScatter").addReduceScatter(src, dst, op);
        return this;
    }

    /** Checks and adds {@link #reduceScatter(DeviceTensor, DeviceTensor, ReduceOp)} (on the communicator's own handle). */
    void addReduceScatter(DeviceTensor src, DeviceTensor dst, ReduceOp op) {
        requireTensor("reduceScatter", "src", src);
        requireTensor("reduceScatter", "dst", dst);
        Objects.requireNonNull(op, "reduceScatter: op is null");
        requireSameDtype("reduceScatter", src, dst);
        requireWorldTimes("reduceScatter", "src", src, "dst", dst);
        checks.checkReducible("reduceScatter", src.dtype(), op);
        boolean inPlace = inPlaceOrApart("reduceScatter", src, dst,
                src.address() + communicator.rank() * dst.bytes(), "dst this rank's shard of src");
        if (inPlace) {
            commands().reduceScatter(src, op);
        } else {
            commands().reduceScatter(src, dst, op);
        }
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
        handle("broadcast").addBroadcast(src, dst, root);
        return this;
    }

    /** Checks and adds {@link #broadcast(DeviceTensor, DeviceTensor, int)} (on the communicator's own handle). */
    void addBroadcast(DeviceTensor src, DeviceTensor dst, int root) {
        requireTensor("broadcast", "src", src);
        requireTensor("broadcast", "dst", dst);
        checks.checkRoot("broadcast", root);
        requireSameDtype("broadcast", src, dst);
        requireCount("broadcast", "dst", dst, src.count(), "src's count");
        checks.checkSupported("broadcast", src.dtype());
        boolean inPlace = inPlaceOrApart("broadcast", src, dst, src.address(), "dst equal to src");
        if (inPlace) {
            commands().broadcast(dst, root);
        } else {
            commands().broadcast(src, dst, root);
        }
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
        handle("reduce").addReduce(src, dst, op, root);
        return this;
    }

    /** Checks and adds {@link #reduce(DeviceTensor, DeviceTensor, ReduceOp, int)} (on the communicator's own handle). */
    void addReduce(DeviceTensor src, DeviceTensor dst, ReduceOp op, int root) {
        requireTensor("reduce", "src", src);
        Objects.requireNonNull(op, "reduce: op is null");
        checks.checkRoot("reduce", root);
        if (requireRootBuffer("reduce", "dst", dst, root)) {
            requireSameDtype("reduce", src, dst);
            requireCount("reduce", "dst", dst, src.count(), "src's count");
            if (root == communicator.rank()) {
                inPlaceOrApart("reduce", src, dst, src.address(), "dst equal to src");
            }
        }
        checks.checkReducible("reduce", src.dtype(), op);
        commands().reduce(src, dst, op, root);
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
        handle("gather").addGather(src, dst, root);
        return this;
    }

    /** Checks and adds {@link #gather(DeviceTensor, DeviceTensor, int)} (on the communicator's own handle). */
    void addGather(DeviceTensor src, DeviceTensor dst, int root) {
        requireTensor("gather", "src", src);
        checks.checkRoot("gather", root);
        if (requireRootBuffer("gather", "dst", dst, root)) {
            requireSameDtype("gather", src, dst);
            requireWorldTimes("gather", "dst", dst, "src", src);
            if (root == communicator.rank()) {
                inPlaceOrApart("gather", src, dst, src.address() - root * src.bytes(), "src the root's slot of dst");
            }
        }
        checks.checkSupported("gather", src.dtype());
        commands().gather(src, dst, root);
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
        handle("scatter").addScatter(src, dst, root);
        return this;
    }

    /** Checks and adds {@link #scatter(DeviceTensor, DeviceTensor, int)} (on the communicator's own handle). */
    void addScatter(DeviceTensor src, DeviceTensor dst, int root) {
        requireTensor("scatter", "dst", dst);
        checks.checkRoot("scatter", root);
        if (requireRootBuffer("scatter", "src", src, root)) {
            requireSameDtype("scatter", src, dst);
            requireWorldTimes("scatter", "src", src, "dst", dst);
            if (root == communicator.rank()) {
                inPlaceOrApart("scatter", src, dst, src.address() + root * dst.bytes(), "dst the root's slot of src");
            }
        }
        checks.checkSupported("scatter", dst.dtype());
        commands().scatter(src, dst, root);
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
        handle("allToAll").addAllToAll(send, sendCounts, recv, recvCounts);
        return this;
    }

    /** Checks and adds {@link #allToAll(DeviceTensor, long[], DeviceTensor, long[])} (on the communicator's own handle). */
    void addAllToAll(DeviceTensor send, long[] sendCounts, DeviceTensor recv, long[] recvCounts) {
        requireTensor("allToAll", "send", send);
        requireTensor("allToAll", "recv", recv);
        // Checked on copies (another thread may change the caller's arrays meanwhile), reused from
        // call to call: the command buffer copies them again when it makes a command.
        long[] sends = countsCopy(Objects.requireNonNull(sendCounts, "allToAll: sendCounts is null"), "sendCounts", 0);
        long[] recvs = countsCopy(Objects.requireNonNull(recvCounts, "allToAll: recvCounts is null"), "recvCounts", 1);
        if (send.dtype() != recv.dtype()) {
            throw new IllegalArgumentException("allToAll: send dtype " + send.dtype() + " differs from recv dtype "
                    + recv.dtype());
        }
        requireCounts("sendCounts", sends, "send", send);
        requireCounts("recvCounts", recvs, "recv", recv);
        int rank = communicator.rank();
        if (sends[rank] != recvs[rank]) {
            throw new IllegalArgumentException("allToAll: sendCounts[" + rank + "] = " + sends[rank]
                    + " (to this rank itself) must equal recvCounts[" + rank + "] = " + recvs[rank]);
        }
        if (overlap(send, recv)) {
            throw new IllegalArgumentException("allToAll: send " + send + " and recv " + recv + " overlap");
        }
        checks.checkSupported("allToAll", send.dtype());
        commands().allToAll(send, sends, recv, recvs);
    }

    /** {@code counts} (world size entries, else refused) copied into the command buffer's scratch array {@code which}. */
    private long[] countsCopy(long[] counts, String argument, int which) {
        int world = communicator.worldSize();
        if (counts.length != world) {
            throw new IllegalArgumentException("allToAll: " + argument + " has " + counts.length
                    + " entries, expected world size " + world);
        }
        long[] copy = commands().countsScratch(which, world);
        System.arraycopy(counts, 0, copy, 0, world);
        return copy;
    }

    /** Counts of an uneven all-to-all: one per rank, none negative, summing to at most the tensor's count. */
    private void requireCounts(String argument, long[] counts, String tensorName, DeviceTensor tensor) {
        int world = counts.length; // countsCopy checked it
        long sum = 0;
        for (int q = 0; q < world; q++) {
            if (counts[q] < 0) {
                throw new IllegalArgumentException("allToAll: " + argument + "[" + q + "] = " + counts[q]
                        + " out of range [0, " + tensor.count() + "]");
            }
            if (counts[q] > tensor.count() - sum) {
                throw new IllegalArgumentException("allToAll: " + argument + " up to [" + q + "] sum past "
                        + tensorName + "'s " + tensor.count() + " elements (" + argument + "[" + q + "] = " + counts[q]
                        + " after " + sum + "; allowed [0, " + (tensor.count() - sum) + "])");
            }
            sum += counts[q];
        }
    }

    private static void requireSameDtype(String operation, DeviceTensor src, DeviceTensor dst) {
        if (src.dtype() != dst.dtype()) {
            throw new IllegalArgumentException(operation + ": src dtype " + src.dtype() + " differs from dst dtype "
                    + dst.dtype());
        }
    }

    private static void requireCount(String operation, String argument, DeviceTensor tensor, long expected,
                                     String what) {
        if (tensor.count() != expected) {
            throw new IllegalArgumentException(operation + ": " + argument + " has " + tensor.count()
                    + " elements, expected " + what + " " + expected);
        }
    }

    /** {@code whole} must hold world size times {@code part}'s elements. */
    private void requireWorldTimes(String operation, String wholeName, DeviceTensor whole, String partName,
                                   DeviceTensor part) {
        int world = communicator.worldSize();
        if (part.count() > Long.MAX_VALUE / world || whole.count() != part.count() * world) {
            throw new IllegalArgumentException(operation + ": " + wholeName + " has " + whole.count()
                    + " elements, expected " + partName + " " + part.count() + " x world size " + world);
        }
    }

    /**
     * A tensor that only the root uses: required there (null is refused with the root named),
     * optional elsewhere. {@return whether it was given (and is then checked like any tensor)}
     */
    private boolean requireRootBuffer(String operation, String argument, DeviceTensor tensor, int root) {
        if (tensor == null) {
            if (root == communicator.rank()) {
                throw new IllegalArgumentException(operation + ": " + argument + " is null on the root rank " + root
                        + "; only ranks other than the root may pass null");
            }
            return false;
        }
        requireTensor(operation, argument, tensor);
        return true;
    }

    /**
     * NCCL's in-place rule: {@return true when {@code dst} starts at {@code inPlaceDst} (in place),
     * false when the tensors do not overlap}
     *
     * @throws IllegalArgumentException when they overlap otherwise (NCCL's result would be undefined)
     */
    private static boolean inPlaceOrApart(String operation, DeviceTensor src, DeviceTensor dst, long inPlaceDst,
                                          String rule) {
        if (dst.address() == inPlaceDst) {
            return true;
        }
        if (overlap(src, dst)) {
            throw new IllegalArgumentException(operation + ": src " + src + " and dst " + dst
                    + " overlap but are not in place (in place needs " + rule + "; otherwise they must not overlap)");
        }
        return false;
    }

    private static boolean overlap(DeviceTensor a, DeviceTensor b) {
        return a.bytes() > 0 && b.bytes() > 0 && a.address() < b.address() + b.bytes()
                && b.address() < a.address() + a.bytes();
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
        handle("execute").executeOpen(signal);
    }

    /** Checks and adds {@link #execute(CudaEvent)} (on the communicator's own handle). */
    void executeOpen(CudaEvent signal) {
        if (signal != null && signal.isClosed()) {
            throw new IllegalStateException("execute: signal event " + signal + " is closed");
        }
        communicator.execute(signal);
    }

    /** Discards the transaction if it was not executed; otherwise does nothing. */
    @Override
    public void close() {
        communicator.closeTransaction(number);
    }

    /**
     * The number of commands added so far (and not yet executed or discarded): a rejected command
     * is never added.
     *
     * @return the number of commands in the transaction
     */
    public int size() {
        return isOpen() ? commands().size() : 0;
    }

    /** {@return the sequence number of this transaction on its communicator (1, 2, ...)} */
    public long number() {
        return number == CURRENT ? communicator.openTransactionNumber() : number;
    }

    /**
     * Whether commands can still be added (neither executed nor closed).
     *
     * @return whether the transaction is open
     */
    public boolean isOpen() {
        return communicator.isOpenTransaction(number);
    }

    /** {@return the commands so far (tests look at what the checks made)} */
    CommandBuffer buffer() {
        return commands();
    }

    /** The communicator's command buffer, which holds this transaction's commands while it is open. */
    private CommandBuffer commands() {
        return communicator.pendingCommands();
    }

    /**
     * A tensor argument: given, its memory not freed, and on this communicator's device when its
     * device is known (tensors of a {@code DeviceMemory}); checked before anything native happens.
     */
    private void requireTensor(String operation, String argument, DeviceTensor tensor) {
        Tensors.requireUsable(operation, argument, tensor, communicator.rank(), communicator.device());
    }

    private void requireDivisible(String operation, DeviceTensor tensor) {
        int world = communicator.worldSize();
        if (tensor.count() % world != 0) {
            throw new IllegalArgumentException(operation + ": " + tensor.count() + " elements not divisible by world size "
                    + world);
        }
    }

    /**
     * A user's handle: checks that it is the open transaction, used from the thread that began it;
     * {@return the communicator's own handle, which checks and adds the commands}: so the user's
     * handle is passed to nothing, and the JIT can scalar-replace it in a chain of calls.
     */
    private Transaction handle(String operation) {
        requireOpen(operation);
        return communicator.currentTransaction();
    }

    /** Open, used from the thread that began it, on a usable communicator. */
    private void requireOpen(String operation) {
        communicator.requireOpenTransaction(operation, number);
    }

    @Override
    public String toString() {
        return "Transaction#" + number() + "[rank " + communicator.rank() + ", "
                + (isOpen() ? "OPEN, " + commands() : communicator.transactionOutcome(number())) + "]";
    }
}
