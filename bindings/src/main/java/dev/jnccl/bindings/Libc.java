package dev.jnccl.bindings;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.invoke.MethodHandle;

/**
 * The C library's functions as method handles, for every jnccl module that calls libc directly
 * (the dynamic linker here, the C environment and signal handlers of MPI mode). Each handle is made
 * after {@link NativeAccess}'s check, so that a missing {@code --enable-native-access} is reported
 * with jnccl's hint before the first restricted call, whichever module makes it. Not API.
 */
public final class Libc {
    private static final Linker LINKER = Linker.nativeLinker();

    private Libc() {}

    /**
     * A downcall handle of the libc function {@code name}.
     *
     * @param name       the C function, e.g. {@code setenv}
     * @param descriptor its signature
     * @return the handle
     * @throws NativeLibraryException when the JDK refuses native access to jnccl
     * @throws java.util.NoSuchElementException when libc has no such function
     */
    public static MethodHandle function(String name, FunctionDescriptor descriptor) {
        NativeAccess.check();
        return LINKER.downcallHandle(LINKER.defaultLookup().findOrThrow(name), descriptor);
    }

    /**
     * The platform's native linker, for handles to functions found elsewhere than libc (call
     * {@link #function} or load the libraries first, so that native access is checked).
     *
     * @return the linker
     */
    public static Linker linker() {
        return LINKER;
    }
}
