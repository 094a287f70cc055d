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

    /** The commands, in order (a read-only view). */
    public List<Command> commands() {
        return view;
    }

    public boolean isEmpty() {
        return commands.isEmpty();
    }

    public int size() {
        return commands.size();
    }

    /** Total bytes of all commands. */
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
