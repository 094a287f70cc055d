package dev.jnccl;

import dev.jnccl.spi.Command;
import dev.jnccl.spi.Command.Kind;
import java.util.AbstractList;
import java.util.Arrays;
import java.util.List;
import java.util.RandomAccess;

/**
 * The commands of the open transaction of one communicator, in the order they were added. One
 * buffer serves every transaction of its communicator (one is open at a time), so that a training
 * loop's thousands of calls per step allocate nothing: the slots grow only when a transaction has
 * more commands than any before it, and a command that {@linkplain Command#matches matches} the
 * one its slot held in an earlier transaction (a training step repeats its calls) is reused instead
 * of made again, compared before anything is built. Commands are immutable, so one that an earlier
 * transaction's flight recorder entry (or a graph's captured list) still holds can be shared.
 */
final class CommandBuffer {
    private Command[] slots = new Command[8];
    private int size;
    /** The read-only view the transport, the runner and the recorder see: one object for every transaction. */
    private final List<Command> view = new View();
    /** The scratch arrays of {@link #countsScratch}: sends, receives. */
    private final long[][] countsScratch = new long[2][0];

    /**
     * Adds a command of these (checked) arguments: the slot's earlier command when it matches, else
     * a new one. The counts of a counted kind are the caller's scratch copies, which it may reuse
     * once this returns: a new command copies them, a reused one equals them.
     */
    void add(Kind kind, DeviceTensor src, DeviceTensor dst, ReduceOp op, int target, long[] sendCounts,
             long[] recvCounts) {
        if (size < slots.length && slots[size] != null
                && slots[size].matches(kind, src, dst, op, target, sendCounts, recvCounts)) {
            size++;
            return;
        }
        Command made = recvCounts != null ? Command.counted(kind, src, sendCounts, dst, recvCounts)
                : Command.of(kind, src, dst, op, target);
        if (size == slots.length) {
            slots = Arrays.copyOf(slots, size * 2);
        }
        slots[size++] = made;
    }

    /**
     * {@return scratch array {@code which} (0: sends, 1: receives) of {@code world} entries} for a
     * counted command's counts while they are checked; made once, overwritten by the next one.
     */
    long[] countsScratch(int which, int world) {
        if (countsScratch[which].length != world) {
            countsScratch[which] = new long[world];
        }
        return countsScratch[which];
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
