package dev.jnccl.junit;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * Variables of the process environment, set for one pack's life and then restored. The host
 * emulation reads its fault hooks and NCCL_MULTI_RANK_GPU_ENABLE with C's {@code getenv} when a
 * communicator is created, and {@link System#getenv()} cannot change them, so this calls libc. Set
 * and restored only while no rank of ours runs: {@code setenv} races with a concurrent {@code getenv}.
 */
@SuppressWarnings("restricted")
final class ProcessEnv implements AutoCloseable {
    private static final Linker LINKER = Linker.nativeLinker();
    private static final MethodHandle SETENV = libc("setenv", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT));
    private static final MethodHandle UNSETENV = libc("unsetenv", FunctionDescriptor.of(JAVA_INT, ADDRESS));
    private static final MethodHandle GETENV = libc("getenv", FunctionDescriptor.of(ADDRESS, ADDRESS));

    private final Map<String, String> previous = new LinkedHashMap<>();

    private ProcessEnv() {}

    private static MethodHandle libc(String name, FunctionDescriptor descriptor) {
        return LINKER.downcallHandle(LINKER.defaultLookup().findOrThrow(name), descriptor);
    }

    /** Sets {@code variables}; {@link #close()} gives each its earlier value back (or unsets it). */
    static ProcessEnv set(Map<String, String> variables) {
        ProcessEnv env = new ProcessEnv();
        try {
            variables.forEach((name, value) -> {
                env.previous.put(name, get(name));
                put(name, value);
            });
        } catch (RuntimeException | Error e) {
            env.close();
            throw e;
        }
        return env;
    }

    private static String get(String name) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment value = (MemorySegment) GETENV.invokeExact(arena.allocateFrom(name));
            return value.equals(MemorySegment.NULL) ? null : value.reinterpret(Integer.MAX_VALUE).getString(0);
        } catch (Throwable t) {
            throw new IllegalStateException("getenv(" + name + ") failed: " + t, t);
        }
    }

    private static void put(String name, String value) {
        int rc;
        try (Arena arena = Arena.ofConfined()) {
            rc = value == null ? (int) UNSETENV.invokeExact(arena.allocateFrom(name))
                    : (int) SETENV.invokeExact(arena.allocateFrom(name), arena.allocateFrom(value), 1);
        } catch (Throwable t) {
            throw new IllegalStateException("setenv(" + name + ", " + value + ") failed: " + t, t);
        }
        if (rc != 0) {
            throw new IllegalStateException("setenv(" + name + ", " + value + ") returned " + rc);
        }
    }

    /** Restores the earlier values, the last set first. */
    @Override
    public void close() {
        var names = new java.util.ArrayList<>(previous.keySet()).reversed();
        for (String name : names) {
            put(name, previous.get(name));
        }
        previous.clear();
    }
}
