package dev.jnccl.bindings;

import java.io.PrintStream;
import org.slf4j.Logger;

/**
 * The two warnings a user must see whatever the logging setup: the missing
 * {@code --enable-native-access} hint and "running on the HOST EMULATION". Through SLF4J when it
 * would show them; on stderr when it would not (no SLF4J provider on the class path gives a
 * logger that drops everything, or the logger's level is above WARN), since a user who silently
 * gets the emulation instead of the GPU, or the JDK's native-access warning without the fix, is
 * left to guess. Not API.
 */
final class Notices {
    private Notices() {}

    /** Logs {@code message} at WARN, or prints it to stderr when the logger would drop it. */
    static void warn(Logger log, String message) {
        warn(log, message, System.err);
    }

    static void warn(Logger log, String message, PrintStream stderr) {
        if (log.isWarnEnabled()) {
            log.warn(message);
        } else {
            stderr.println("jnccl WARNING: " + message);
            stderr.flush();
        }
    }
}
