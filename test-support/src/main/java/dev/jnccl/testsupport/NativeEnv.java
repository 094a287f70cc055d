package dev.jnccl.testsupport;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Sets process environment variables through libc, where the host emulation's C {@code getenv}
 * sees them ({@link System#getenv()} is a snapshot taken at JVM start and cannot be changed).
 * The emulation reads its fault-injection and delay variables when communicators and streams are
 * created, so set them before that and close this (which restores the previous values) afterwards.
 *
 * <p>{@code setenv} is not thread-safe against a concurrent {@code getenv}: call {@link #set} and
 * {@link #close} only while no other thread creates streams or communicators.
 */
@SuppressWarnings("restricted")
public final class NativeEnv implements AutoCloseable {
    private static final MethodHandle SETENV;
    private static final MethodHandle UNSETENV;
    private static final MethodHandle GETENV;

    static {
        Linker linker = Linker.nativeLinker();
        var libc = linker.defaultLookup();
        SETENV = linker.downcallHandle(libc.findOrThrow("setenv"), FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT));
        UNSETENV = linker.downcallHandle(libc.findOrThrow("unsetenv"), FunctionDescriptor.of(JAVA_INT, ADDRESS));
        GETENV = linker.downcallHandle(libc.findOrThrow("getenv"), FunctionDescriptor.of(ADDRESS, ADDRESS));
    }

    /** Previous values (null: was unset), in the order the variables were set. */
    private final Map<String, String> previous = new LinkedHashMap<>();
    private boolean closed;

    private NativeEnv() {}

    /** Sets {@code nameValuePairs} (name, value, name, value, ...) and remembers the previous values. */
    public static NativeEnv set(String... nameValuePairs) {
        if (nameValuePairs.length % 2 != 0) {
            throw new IllegalArgumentException("NativeEnv.set: odd number of arguments (name/value pairs expected)");
        }
        NativeEnv env = new NativeEnv();
        try {
            for (int i = 0; i < nameValuePairs.length; i += 2) {
                String name = nameValuePairs[i];
                env.previous.putIfAbsent(name, get(name));
                put(name, nameValuePairs[i + 1]);
            }
        } catch (RuntimeException e) {
            env.close();
            throw e;
        }
        return env;
    }

    /** The current value of {@code name} in the C environment, or null. */
    public static String get(String name) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment value = (MemorySegment) GETENV.invokeExact(arena.allocateFrom(name));
            return value.equals(MemorySegment.NULL) ? null : value.reinterpret(Integer.MAX_VALUE).getString(0);
        } catch (Throwable t) {
            throw new IllegalStateException("getenv(" + name + ") failed", t);
        }
    }

    private static void put(String name, String value) {
        try (Arena arena = Arena.ofConfined()) {
            int rc = value == null
                    ? (int) UNSETENV.invokeExact(arena.allocateFrom(name))
                    : (int) SETENV.invokeExact(arena.allocateFrom(name), arena.allocateFrom(value), 1);
            if (rc != 0) {
                throw new IllegalStateException((value == null ? "unsetenv(" : "setenv(") + name + ") returned " + rc);
            }
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException("setenv/unsetenv(" + name + ") failed", t);
        }
    }

    /** Restores the previous values (unsets the variables that were unset). Idempotent. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        List<String> names = new ArrayList<>(previous.keySet());
        for (int i = names.size() - 1; i >= 0; i--) {
            put(names.get(i), previous.get(names.get(i)));
        }
    }
}
