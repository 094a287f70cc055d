package dev.jnccl;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/** The commands of one transaction, in the order they were added. */
public final class CommandBuffer {
    private final List<Command> commands = new ArrayList<>();
    private final List<Command> view = Collections.unmodifiableList(commands);

    CommandBuffer() {}

    void add(Command command) {
        commands.add(command);
    }

    void clear() {
        commands.clear();
    }

    /** {@return the commands, in order (a read-only view)} */
    public List<Command> commands() {
        return view;
    }

    /**
     * Whether no command was added.
     *
     * @return whether the buffer is empty
     */
    public boolean isEmpty() {
        return commands.isEmpty();
    }

    /**
     * The number of commands.
     *
     * @return the number of commands added
     */
    public int size() {
        return commands.size();
    }

    /** {@return the total bytes of all commands} */
    public long bytes() {
        long total = 0;
        for (Command command : commands) {
            total += command.bytes();
        }
        return total;
    }

    @Override
    public String toString() {
        return commands.toString();
    }
}
