package dev.jnccl;

import dev.jnccl.spi.Command;
import java.util.ArrayList;
import java.util.List;

/** The commands of one transaction, in the order they were added (owned by its {@link Transaction}). */
final class CommandBuffer {
    private final List<Command> commands = new ArrayList<>();

    void add(Command command) {
        commands.add(command);
    }

    void clear() {
        commands.clear();
    }

    /** {@return a read-only copy of the commands, in order} */
    List<Command> snapshot() {
        return List.copyOf(commands);
    }

    int size() {
        return commands.size();
    }

    @Override
    public String toString() {
        return commands.toString();
    }
}
