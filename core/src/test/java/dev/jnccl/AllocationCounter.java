package dev.jnccl;

import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.management.ManagementFactory;
import org.junit.jupiter.api.Assumptions;

/**
 * The bytes a thread allocated, from {@code com.sun.management.ThreadMXBean} (looked up
 * reflectively: core's module does not read jdk.management, and the tests run patched into it).
 * A JVM without the counter skips the test visibly.
 */
record AllocationCounter(Object bean, MethodHandle current, MethodHandle ofThread) {

    static AllocationCounter create() {
        Object bean = ManagementFactory.getThreadMXBean();
        try {
            Class<?> type = Class.forName("com.sun.management.ThreadMXBean");
            Assumptions.assumeTrue(type.isInstance(bean), "this JVM has no per-thread allocation counter");
            boolean counting = (boolean) type.getMethod("isThreadAllocatedMemorySupported").invoke(bean)
                    && (boolean) type.getMethod("isThreadAllocatedMemoryEnabled").invoke(bean);
            Assumptions.assumeTrue(counting, "this JVM does not count the bytes a thread allocates");
            MethodHandles.Lookup lookup = MethodHandles.publicLookup();
            MethodHandle current = lookup.findVirtual(type, "getCurrentThreadAllocatedBytes",
                    MethodType.methodType(long.class)).asType(MethodType.methodType(long.class, Object.class));
            MethodHandle ofThread = lookup.findVirtual(type, "getThreadAllocatedBytes",
                    MethodType.methodType(long.class, long.class)).asType(
                    MethodType.methodType(long.class, Object.class, long.class));
            return new AllocationCounter(bean, current, ofThread);
        } catch (ReflectiveOperationException e) {
            Assumptions.abort("no per-thread allocation counter: " + e);
            throw new AssertionError(e);
        }
    }

    /** {@return the bytes the calling thread allocated so far} */
    long getCurrentThreadAllocatedBytes() {
        try {
            return (long) current.invokeExact(bean);
        } catch (Throwable e) {
            throw new IllegalStateException(e);
        }
    }

    /** {@return the bytes thread {@code id} allocated so far (-1 once it has ended)} */
    long threadAllocatedBytes(long id) {
        try {
            return (long) ofThread.invokeExact(bean, id);
        } catch (Throwable e) {
            throw new IllegalStateException(e);
        }
    }
}
