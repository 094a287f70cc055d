package dev.jnccl;

import dev.jnccl.cuda.CudaEvent;
import java.util.Objects;

/**
 * A group of communication commands that runs as one unit on the communicator's comms stream:
 * after the "ready" event given to {@link Communicator#begin}, and before the "signal" event given
 * to {@link #execute}. Commands are checked when added, before anything native happens.
 *
 * <p>Use it from one thread, once: add commands, {@link #execute} it, or {@link #close} it without
 * executing to discard it. Closing after execute does nothing, so try-with-resources fits.
 */
public final class Transaction implements AutoCloseable {
    private enum State { OPEN, EXECUTED, DISCARDED }

    private final Communicator communicator;
    private final CudaEvent ready;
    private final long number;
    private final CommandBuffer buffer = new CommandBuffer();
    private State state = State.OPEN;

    Transaction(Communicator communicator, CudaEvent ready, long number) {
        this.communicator = communicator;
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
        Objects.requireNonNull(tensor, "reduceScatter: tensor is null");
        Objects.requireNonNull(op, "reduceScatter: op is null");
        communicator.checkReducible("reduceScatter", tensor.dtype(), op);
        requireDivisible("reduceScatter", tensor);
        buffer.add(new Command.ScatterReduce(tensor, op));
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
        Objects.requireNonNull(shard, "allGather: shard is null");
        Objects.requireNonNull(full, "allGather: full is null");
        if (shard.dtype() != full.dtype()) {
            throw new IllegalArgumentException("allGather: shard dtype " + shard.dtype() + " differs from full dtype "
                    + full.dtype());
        }
        int world = communicator.worldSize();
        if (full.count() != shard.count() * world) {
            throw new IllegalArgumentException("allGather: full has " + full.count() + " elements, expected shard "
                    + shard.count() + " x world size " + world + " = " + shard.count() * world);
        }
        communicator.checkSupported("allGather", shard.dtype());
        buffer.add(new Command.Gather(shard, full));
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
        Objects.requireNonNull(tensor, "destructiveAllToAll: tensor is null");
        communicator.checkSupported("destructiveAllToAll", tensor.dtype());
        requireDivisible("destructiveAllToAll", tensor);
        buffer.add(new Command.AllToAll(tensor));
        return this;
    }

    /**
     * Sends {@code tensor} to {@code peer}; the peer must post a matching {@link #recv}.
     *
     * @param tensor what is sent
     * @param peer the receiving rank
     * @return this transaction
     */
    public Transaction send(DeviceTensor tensor, int peer) {
        requireOpen("send");
        Objects.requireNonNull(tensor, "send: tensor is null");
        communicator.checkPeer("send", peer);
        communicator.checkSupported("send", tensor.dtype());
        buffer.add(new Command.Send(tensor, peer));
        return this;
    }

    /**
     * Receives into {@code tensor} from {@code peer}; the peer must post a matching {@link #send}.
     *
     * @param tensor where the message lands
     * @param peer the sending rank
     * @return this transaction
     */
    public Transaction recv(DeviceTensor tensor, int peer) {
        requireOpen("recv");
        Objects.requireNonNull(tensor, "recv: tensor is null");
        communicator.checkPeer("recv", peer);
        communicator.checkSupported("recv", tensor.dtype());
        buffer.add(new Command.Recv(tensor, peer));
        return this;
    }

    /**
     * Enqueues the commands on the comms stream, after the ready event, as one NCCL group (the
     * all-to-all's rounds follow as ordered groups), then records {@code signal} (may be null). An
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
        if (state == State.OPEN) {
            state = State.DISCARDED;
            buffer.clear();
            communicator.transactionEnded(this);
        }
    }

    /** {@return the commands added so far} */
    public CommandBuffer commands() {
        return buffer;
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

    private void requireDivisible(String operation, DeviceTensor tensor) {
        int world = communicator.worldSize();
        if (tensor.count() % world != 0) {
            throw new IllegalArgumentException(operation + ": " + tensor.count() + " elements not divisible by world size "
                    + world);
        }
    }

    private void requireOpen(String operation) {
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
