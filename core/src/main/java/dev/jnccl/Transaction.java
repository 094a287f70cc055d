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
 */
public final class Transaction implements AutoCloseable {
    private enum State { OPEN, EXECUTED, DISCARDED }

    private final Communicator communicator;
    private final Checks checks;
    private final CudaEvent ready;
    private final long number;
    private final CommandBuffer buffer = new CommandBuffer();
    /** The thread that began it: commands, execute and close from another thread would race with it. */
    private final Thread owner = Thread.currentThread();
    private State state = State.OPEN;

    Transaction(Communicator communicator, CudaEvent ready, long number) {
        this.communicator = communicator;
        this.checks = communicator.checks();
        this.ready = ready;
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
        requireOpen("reduceScatter");
        requireTensor("reduceScatter", "tensor", tensor);
        Objects.requireNonNull(op, "reduceScatter: op is null");
        checks.checkReducible("reduceScatter", tensor.dtype(), op);
        requireDivisible("reduceScatter", tensor);
        buffer.add(new Command.ReduceScatter(tensor, op));
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
        requireOpen("allGather");
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
        buffer.add(new Command.AllGather(shard, full));
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
        requireOpen("destructiveAllToAll");
        requireTensor("destructiveAllToAll", "tensor", tensor);
        checks.checkSupported("destructiveAllToAll", tensor.dtype());
        requireDivisible("destructiveAllToAll", tensor);
        buffer.add(new Command.DestructiveAllToAll(tensor));
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
        requireOpen("allToAll");
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
        if (send.count() > 0 && send.address() < recv.address() + recv.bytes()
                && recv.address() < send.address() + send.bytes()) {
            throw new IllegalArgumentException("allToAll: send " + send + " and recv " + recv
                    + " overlap; use destructiveAllToAll for an in-place exchange");
        }
        checks.checkSupported("allToAll", send.dtype());
        buffer.add(new Command.AllToAll(send, recv));
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
        requireOpen("broadcast");
        requireTensor("broadcast", "tensor", tensor);
        checks.checkRoot("broadcast", root);
        checks.checkSupported("broadcast", tensor.dtype());
        buffer.add(new Command.Broadcast(tensor, root));
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
        requireOpen("allReduce");
        requireTensor("allReduce", "tensor", tensor);
        Objects.requireNonNull(op, "allReduce: op is null");
        checks.checkReducible("allReduce", tensor.dtype(), op);
        buffer.add(new Command.AllReduce(tensor, op));
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
        requireOpen("send");
        requireTensor("send", "tensor", tensor);
        checks.checkPeer("send", peer);
        checks.checkSupported("send", tensor.dtype());
        buffer.add(new Command.Send(tensor, peer));
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
        requireOpen("recv");
        requireTensor("recv", "tensor", tensor);
        checks.checkPeer("recv", peer);
        checks.checkSupported("recv", tensor.dtype());
        buffer.add(new Command.Recv(tensor, peer));
        return this;
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
        requireOpen("execute");
        if (signal != null && signal.isClosed()) {
            throw new IllegalStateException("execute: signal event " + signal + " is closed");
        }
        state = State.EXECUTED;
        communicator.execute(this, signal);
    }

    /** Discards the transaction if it was not executed; otherwise does nothing. */
    @Override
    public void close() {
        requireOwner("close");
        if (state == State.OPEN) {
            state = State.DISCARDED;
            buffer.clear();
            communicator.transactionEnded(this);
        }
    }

    /**
     * The number of commands added so far (and not yet executed or discarded): a rejected command
     * is never added.
     *
     * @return the number of commands in the transaction
     */
    public int size() {
        return buffer.size();
    }

    /** {@return the sequence number of this transaction on its communicator (1, 2, ...)} */
    public long number() {
        return number;
    }

    /**
     * Whether commands can still be added (neither executed nor closed).
     *
     * @return whether the transaction is open
     */
    public boolean isOpen() {
        return state == State.OPEN;
    }

    CudaEvent ready() {
        return ready;
    }

    CommandBuffer buffer() {
        return buffer;
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

    private void requireOwner(String operation) {
        Thread current = Thread.currentThread();
        if (current != owner) {
            throw new IllegalStateException(operation + ": transaction #" + number + " of rank " + communicator.rank()
                    + " belongs to thread \"" + owner.getName() + "\" that began it; it was used from thread \""
                    + current.getName() + "\"");
        }
    }

    private void requireOpen(String operation) {
        requireOwner(operation);
        switch (state) {
            case OPEN -> communicator.requireUsable(operation);
            case EXECUTED -> throw new IllegalStateException(operation + ": transaction #" + number + " of rank "
                    + communicator.rank() + " was already executed");
            case DISCARDED -> throw new IllegalStateException(operation + ": transaction #" + number + " of rank "
                    + communicator.rank() + " was closed without executing");
        }
    }

    @Override
    public String toString() {
        return "Transaction#" + number + "[rank " + communicator.rank() + ", " + state + ", " + buffer + "]";
    }
}
