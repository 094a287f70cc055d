package dev.jnccl.bindings;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;

/**
 * The dynamic linker (dlopen / dlsym / dlerror / dlinfo of libc), used to resolve library names
 * the way the platform does and to get its real error text, which {@code SymbolLookup.libraryLookup}
 * hides. Once a file is resolved, {@link NativeLibraries} hands its path to {@code System.load}.
 */
final class Dl {
    private static final int RTLD_NOW = 2;
    private static final int RTLD_GLOBAL = 0x100;
    private static final int RTLD_DI_LINKMAP = 2;
    /** struct link_map { ElfW(Addr) l_addr; char *l_name; ... }: l_name follows one pointer. */
    private static final long LINK_MAP_L_NAME_OFFSET = ADDRESS.byteSize();

    private static final MethodHandle DLOPEN = Libc.function("dlopen", FunctionDescriptor.of(ADDRESS, ADDRESS, JAVA_INT));
    private static final MethodHandle DLSYM = Libc.function("dlsym", FunctionDescriptor.of(ADDRESS, ADDRESS, ADDRESS));
    private static final MethodHandle DLERROR = Libc.function("dlerror", FunctionDescriptor.of(ADDRESS));
    private static final MethodHandle DLCLOSE = Libc.function("dlclose", FunctionDescriptor.of(JAVA_INT, ADDRESS));
    private static final MethodHandle DLINFO = Libc.function("dlinfo", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS));

    private Dl() {}

    /** A library opened by {@link #open}; {@link #close} drops this reference. */
    record Handle(MemorySegment address, String path) {}

    /** Failure of the dynamic linker, with its own message. */
    static final class DlException extends Exception {
        private static final long serialVersionUID = 1L;

        DlException(String message) {
            super(message, null, false, false);
        }
    }

    /**
     * dlopen(nameOrPath, RTLD_NOW): a bare name is searched like the platform does
     * (LD_LIBRARY_PATH, the ld.so cache, default directories), a path is opened as is.
     */
    static Handle open(String nameOrPath) throws DlException {
        return open(nameOrPath, false);
    }

    /**
     * As {@link #open(String)}; with {@code global} the library's symbols also serve the libraries
     * it loads later (RTLD_GLOBAL: MPI implementations dlopen plugins that expect that). Opening an
     * already loaded library again with {@code global} promotes it.
     */
    static Handle open(String nameOrPath, boolean global) throws DlException {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment handle = (MemorySegment) DLOPEN.invokeExact(arena.allocateFrom(nameOrPath),
                    global ? RTLD_NOW | RTLD_GLOBAL : RTLD_NOW);
            if (handle.equals(MemorySegment.NULL)) {
                throw new DlException(lastError("dlopen failed"));
            }
            return new Handle(handle, pathOf(handle, nameOrPath, arena));
        } catch (DlException e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException("dlopen(" + nameOrPath + ") could not be called", t);
        }
    }

    /** The address of {@code symbol} in {@code handle}'s library, or NULL. */
    static MemorySegment symbol(Handle handle, String symbol) {
        try (Arena arena = Arena.ofConfined()) {
            return (MemorySegment) DLSYM.invokeExact(handle.address(), arena.allocateFrom(symbol));
        } catch (Throwable t) {
            throw new IllegalStateException("dlsym(" + symbol + ") could not be called", t);
        }
    }

    static void close(Handle handle) {
        try {
            int ignored = (int) DLCLOSE.invokeExact(handle.address());
        } catch (Throwable t) {
            throw new IllegalStateException("dlclose could not be called", t);
        }
    }

    private static String pathOf(MemorySegment handle, String fallback, Arena arena) throws Throwable {
        MemorySegment linkMapOut = arena.allocate(ADDRESS);
        if ((int) DLINFO.invokeExact(handle, RTLD_DI_LINKMAP, linkMapOut) != 0) {
            return fallback;
        }
        MemorySegment linkMap = linkMapOut.get(ADDRESS, 0).reinterpret(2 * ADDRESS.byteSize());
        MemorySegment name = linkMap.get(ADDRESS, LINK_MAP_L_NAME_OFFSET);
        if (name.equals(MemorySegment.NULL)) {
            return fallback;
        }
        String path = name.reinterpret(Integer.MAX_VALUE).getString(0);
        return path.isEmpty() ? fallback : path;
    }

    private static String lastError(String fallback) throws Throwable {
        MemorySegment message = (MemorySegment) DLERROR.invokeExact();
        if (message.equals(MemorySegment.NULL)) {
            return fallback;
        }
        return message.reinterpret(Integer.MAX_VALUE).getString(0);
    }
}
