package dev.jnccl.examples.bench;

import java.io.PrintStream;

/**
 * The progress line on stderr while a long run goes: shown only on a terminal (the scripts pass
 * {@code -Djnccl.bench.progress=true} when stderr is one; else {@code System.console()} decides),
 * rewritten in place, cleared before each table line so stdout's table stays clean.
 */
final class Progress {
    private final PrintStream err;
    private final boolean enabled;
    private boolean shown;

    private Progress(PrintStream err, boolean enabled) {
        this.err = err;
        this.enabled = enabled;
    }

    static Progress create(PrintStream err) {
        String property = System.getProperty("jnccl.bench.progress");
        boolean enabled = property != null ? Boolean.parseBoolean(property)
                : System.console() != null && System.console().isTerminal();
        return new Progress(err, enabled);
    }

    synchronized void show(String text) {
        if (enabled) {
            err.print("\r" + text + "\033[K");
            err.flush();
            shown = true;
        }
    }

    synchronized void clear() {
        if (shown) {
            err.print("\r\033[K");
            err.flush();
            shown = false;
        }
    }
}
