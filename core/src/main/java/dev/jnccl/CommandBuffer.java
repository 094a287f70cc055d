package dev.jnccl;

import dev.jnccl.spi.Command;
import java.util.AbstractList;
import java.util.Arrays;
import java.util.List;
import java.util.RandomAccess;

/**
 * The commands of the open transaction of one communicator, in the order they were added. One
 * buffer serves every transaction of its communicator (one is open at a time), so that a training
 * loop's thousands of calls per step allocate nothing: the slots grow only when a transaction has
 * more commands than any before it, and a command equal to the one its slot held in an earlier
 * transaction (the same tensor, operation, root or peer: a training step repeats its calls) is
 * reused instead of made again. Commands are immutable records, so one that an earlier
 * transaction's flight recorder entry (or a graph's captured list) still holds can be shared.
 */
final class CommandBuffer {
    private Command[] slots = new Command[8];
    private int size;
    /** The read-only view the transport, the runner and the recorder see: one object for every transaction. */
    private final List<Command> view = new View();

    /** {@code command} at the end (a command made by the caller: not reusable, e.g. an uneven all-to-all). */
    void add(Command command) {
        if (size == slots.length) {
            slots = Arrays.copyOf(slots, size * 2);
        }
        slots[size++] = command;
    }

    /** {@return the command the next slot held in an earlier transaction, or null (then {@link #add} a new one)} */
    private Command previous() {
        return size < slots.length ? slots[size] : null;
    }

    /** Identity first: a training loop passes the same tensor objects, and a record's equals costs more. */
    private static boolean same(DeviceTensor a, DeviceTensor b) {
        return a == b || a.equals(b);
    }

    /** Adds the slot's earlier command again when {@code same} (it equals the new one); {@return same} */
    private boolean reused(boolean same) {
        if (same) {
            size++;
        }
        return same;
    }

    void allReduce(DeviceTensor tensor, ReduceOp op) {
        if (!reused(previous() instanceof Command.AllReduce c && same(c.tensor(), tensor) && c.op().equals(op))) {
            add(new Command.AllReduce(tensor, op));
        }
    }

    void reduceScatter(DeviceTensor tensor, ReduceOp op) {
        if (!reused(previous() instanceof Command.ReduceScatter c && same(c.tensor(), tensor) && c.op().equals(op))) {
            add(new Command.ReduceScatter(tensor, op));
        }
    }

    void allGather(DeviceTensor shard, DeviceTensor full) {
        if (!reused(previous() instanceof Command.AllGather c && same(c.shard(), shard) && same(c.full(), full))) {
            add(new Command.AllGather(shard, full));
        }
    }

    void broadcast(DeviceTensor tensor, int root) {
        if (!reused(previous() instanceof Command.Broadcast c && same(c.tensor(), tensor) && c.root() == root)) {
            add(new Command.Broadcast(tensor, root));
        }
    }

    void send(DeviceTensor tensor, int peer) {
        if (!reused(previous() instanceof Command.Send c && same(c.tensor(), tensor) && c.peer() == peer)) {
            add(new Command.Send(tensor, peer));
        }
    }

    void recv(DeviceTensor tensor, int peer) {
        if (!reused(previous() instanceof Command.Recv c && same(c.tensor(), tensor) && c.peer() == peer)) {
            add(new Command.Recv(tensor, peer));
        }
    }

    void allToAll(DeviceTensor send, DeviceTensor recv) {
        if (!reused(previous() instanceof Command.AllToAll c && same(c.send(), send) && same(c.recv(), recv))) {
            add(new Command.AllToAll(send, recv));
        }
    }

    void destructiveAllToAll(DeviceTensor tensor) {
        if (!reused(previous() instanceof Command.DestructiveAllToAll c && same(c.tensor(), tensor))) {
            add(new Command.DestructiveAllToAll(tensor));
        }
    }

    void allReduce(DeviceTensor src, DeviceTensor dst, ReduceOp op) {
        if (!reused(previous() instanceof Command.AllReduceOutOfPlace c && same(c.src(), src)
                && same(c.dst(), dst) && c.op().equals(op))) {
            add(new Command.AllReduceOutOfPlace(src, dst, op));
        }
    }

    void reduceScatter(DeviceTensor src, DeviceTensor dst, ReduceOp op) {
        if (!reused(previous() instanceof Command.ReduceScatterOutOfPlace c && same(c.src(), src)
                && same(c.dst(), dst) && c.op().equals(op))) {
            add(new Command.ReduceScatterOutOfPlace(src, dst, op));
        }
    }

    void broadcast(DeviceTensor src, DeviceTensor dst, int root) {
        if (!reused(previous() instanceof Command.BroadcastOutOfPlace c && same(c.src(), src)
                && same(c.dst(), dst) && c.root() == root)) {
            add(new Command.BroadcastOutOfPlace(src, dst, root));
        }
    }

    /** Discards the commands (their slots keep them for reuse by the next transaction). */
    void clear() {
        size = 0;
    }

    /**
     * {@return the commands, in order, as a read-only view}: valid until the buffer is cleared and
     * filled again (the next transaction); whoever keeps commands longer copies them.
     */
    List<Command> view() {
        return view;
    }

    /** {@return a copy of the commands, in order (for tests)} */
    List<Command> snapshot() {
        return List.copyOf(view);
    }

    int size() {
        return size;
    }

    @Override
    public String toString() {
        return view.toString();
    }

    /** The commands so far, read-only. */
    private final class View extends AbstractList<Command> implements RandomAccess {
        @Override
        public Command get(int index) {
            if (index < 0 || index >= size) {
                throw new IndexOutOfBoundsException("command " + index + " of " + size);
            }
            return slots[index];
        }

        @Override
        public int size() {
            return size;
        }
    }
}
