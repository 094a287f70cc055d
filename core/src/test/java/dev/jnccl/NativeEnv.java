package dev.jnccl;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.invoke.MethodHandle;
import java.util.Map;

/**
 * Sets the C environment of this process (the host emulation reads fault-injection variables with
 * getenv when streams and communicators are created). Use in try-with-resources: the variables are
 * removed again on close.
 */
final class NativeEnv implements AutoCloseable {
    private static final Linker LINKER = Linker.nativeLinker();
    private static final MethodHandle SETENV = LINKER.downcallHandle(LINKER.defaultLookup().findOrThrow("setenv"),
            FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT));
    private static final MethodHandle UNSETENV = LINKER.downcallHandle(LINKER.defaultLookup().findOrThrow("unsetenv"),
            FunctionDescriptor.of(JAVA_INT, ADDRESS));

    private final Map<String, String> variables;

    private NativeEnv(Map<String, String> variables) {
        this.variables = variables;
    }

    static NativeEnv set(Map<String, String> variables) {
        try (Arena arena = Arena.ofConfined()) {
            for (Map.Entry<String, String> e : variables.entrySet()) {
                int ignored = (int) SETENV.invokeExact(arena.allocateFrom(e.getKey()), arena.allocateFrom(e.getValue()), 1);
            }
        } catch (Throwable t) {
            throw new IllegalStateException("setenv failed", t);
        }
        return new NativeEnv(variables);
    }

    @Override
    public void close() {
        try (Arena arena = Arena.ofConfined()) {
            for (String name : variables.keySet()) {
                int ignored = (int) UNSETENV.invokeExact(arena.allocateFrom(name));
            }
        } catch (Throwable t) {
            throw new IllegalStateException("unsetenv failed", t);
        }
    }
}
