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

    /**
     * The counts each slot's uneven all-to-all was made with, beside it: the record hands out
     * copies only, and comparing through them would allocate on every call.
     */
    private UnevenCounts[] unevenCounts = new UnevenCounts[0];
    /** The scratch arrays of {@link #countsScratch}: sends, receives. */
    private long[][] countsScratch = new long[2][0];

    /** {@code command} at the end, made anew. */
    private void add(Command command) {
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

    /** {@link #same} for a tensor that may be null (a rooted command's buffer off the root). */
    private static boolean sameOrNull(DeviceTensor a, DeviceTensor b) {
        return a == b || (a != null && a.equals(b));
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

    void reduce(DeviceTensor src, DeviceTensor dst, ReduceOp op, int root) {
        if (!reused(previous() instanceof Command.Reduce c && same(c.src(), src) && sameOrNull(c.dst(), dst)
                && c.op().equals(op) && c.root() == root)) {
            add(new Command.Reduce(src, dst, op, root));
        }
    }

    void gather(DeviceTensor src, DeviceTensor dst, int root) {
        if (!reused(previous() instanceof Command.Gather c && same(c.src(), src) && sameOrNull(c.dst(), dst)
                && c.root() == root)) {
            add(new Command.Gather(src, dst, root));
        }
    }

    void scatter(DeviceTensor src, DeviceTensor dst, int root) {
        if (!reused(previous() instanceof Command.Scatter c && sameOrNull(c.src(), src) && same(c.dst(), dst)
                && c.root() == root)) {
            add(new Command.Scatter(src, dst, root));
        }
    }

    /**
     * An uneven all-to-all. The counts are the caller's checked copies, which it may reuse once
     * this returns: a new command copies them, a reused one equals them.
     */
    void allToAll(DeviceTensor send, long[] sendCounts, DeviceTensor recv, long[] recvCounts) {
        int slot = size;
        if (previous() instanceof Command.UnevenAllToAll c && same(c.send(), send) && same(c.recv(), recv)
                && slot < unevenCounts.length && unevenCounts[slot] != null && unevenCounts[slot].made() == c
                && Arrays.equals(unevenCounts[slot].send(), sendCounts)
                && Arrays.equals(unevenCounts[slot].recv(), recvCounts)) {
            size++;
            return;
        }
        Command.UnevenAllToAll command = new Command.UnevenAllToAll(send, sendCounts, recv, recvCounts);
        add(command);
        if (unevenCounts.length < slots.length) {
            unevenCounts = Arrays.copyOf(unevenCounts, slots.length);
        }
        unevenCounts[slot] = new UnevenCounts(command, sendCounts.clone(), recvCounts.clone());
    }

    /**
     * {@return scratch array {@code which} (0: sends, 1: receives) of {@code world} entries} for an
     * uneven all-to-all's counts while they are checked; made once, overwritten by the next one.
     */
    long[] countsScratch(int which, int world) {
        if (countsScratch[which].length != world) {
            countsScratch[which] = new long[world];
        }
        return countsScratch[which];
    }

    /** The counts {@code made} was made with (copies of its own). */
    private record UnevenCounts(Command.UnevenAllToAll made, long[] send, long[] recv) { }

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
