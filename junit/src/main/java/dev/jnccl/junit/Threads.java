package dev.jnccl.junit;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Stacks of live threads, for a test that ran past its deadline. */
final class Threads {
    private Threads() {}

    /** Every live thread whose name starts with {@code prefix}: its name, state and frames. */
    static List<String> stacks(String prefix) {
        List<String> stacks = new ArrayList<>();
        for (Map.Entry<Thread, StackTraceElement[]> entry : Thread.getAllStackTraces().entrySet()) {
            Thread thread = entry.getKey();
            if (thread.isAlive() && thread.getName().startsWith(prefix)) {
                StringBuilder where = new StringBuilder("  ").append(thread.getName()).append(" (")
                        .append(thread.getState()).append(")");
                for (StackTraceElement frame : entry.getValue()) {
                    where.append("\n      at ").append(frame);
                }
                stacks.add(where.toString());
            }
        }
        stacks.sort(null);
        return stacks;
    }
}
