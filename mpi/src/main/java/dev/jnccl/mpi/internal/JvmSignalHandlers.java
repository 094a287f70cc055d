package dev.jnccl.mpi.internal;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import dev.jnccl.bindings.Libc;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * Keeps MPI's communication layer away from the signals the JVM lives on.
 *
 * <p>HotSpot takes SIGSEGV, SIGBUS, SIGILL and SIGFPE as part of normal work: a safepoint poll
 * touches a protected page, an implicit null check faults. UCX (linked by MPICH, loaded by Open
 * MPI's {@code pml/ucx}) installs its own handler for those signals from its library constructor,
 * i.e. when libmpi is loaded or MPI_Init opens its components, unless {@code UCX_ERROR_SIGNALS}
 * says otherwise. From then on the JVM's next safepoint poll lands in UCX's handler, which prints
 * "Caught signal 11" and re-raises the signal: the JVM dies with a fatal error in ordinary Java
 * code, at a random moment (seen in jnccl's CI under MPICH). Two defences, both here:
 * <ul>
 *   <li>{@link #keepUcxAway()} before libmpi is loaded: {@code UCX_ERROR_SIGNALS} set to empty in
 *       this process's environment unless the user set it, so UCX installs no handler;</li>
 *   <li>{@link #restoreJvmHandlers()} after MPI_Init: a JVM signal whose handler now lives in UCX
 *       (MPI loaded by the application before jnccl, or {@code UCX_ERROR_SIGNALS} set to those
 *       signals) is handed back with UCX's own {@code ucs_debug_disable_signal}, which reinstalls
 *       the handler UCX replaced; any other foreign handler is reported.</li>
 * </ul>
 * Linux (glibc) only, like the rest of MPI mode. Not API.
 */
public final class JvmSignalHandlers {
    /** UCX's list of signals it handles; empty means none. */
    public static final String UCX_ERROR_SIGNALS = "UCX_ERROR_SIGNALS";
    /** The signals HotSpot handles itself as part of normal work (Linux numbers). */
    static final SortedMap<Integer, String> JVM_SIGNALS =
            new TreeMap<>(Map.of(4, "SIGILL", 7, "SIGBUS", 8, "SIGFPE", 11, "SIGSEGV"));
    /** glibc's struct sigaction on Linux starts with the handler (sa_handler / sa_sigaction union); 152 bytes on x86-64. */
    private static final long SIGACTION_BYTES = 256;
    /** Dl_info: dli_fname, dli_fbase, dli_sname, dli_saddr. */
    private static final long DL_INFO_BYTES = 4 * ADDRESS.byteSize();
    /** SIG_DFL and SIG_IGN. */
    private static final long LAST_SPECIAL_HANDLER = 1;

    private static final MethodHandle GETENV = Libc.function("getenv", FunctionDescriptor.of(ADDRESS, ADDRESS));
    private static final MethodHandle SETENV = Libc.function("setenv",
            FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT));
    private static final MethodHandle SIGACTION = Libc.function("sigaction",
            FunctionDescriptor.of(JAVA_INT, JAVA_INT, ADDRESS, ADDRESS));
    private static final MethodHandle DLADDR = Libc.function("dladdr", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));

    private JvmSignalHandlers() {}

    /**
     * Sets {@code UCX_ERROR_SIGNALS} to empty in this process's C environment unless it is set
     * already (the user's value wins; {@link #restoreJvmHandlers()} repairs what it causes). Call
     * before libmpi is loaded: UCX reads it in its library constructor.
     *
     * @return whether this call set it
     */
    public static boolean keepUcxAway() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment name = arena.allocateFrom(UCX_ERROR_SIGNALS);
            if (!((MemorySegment) GETENV.invokeExact(name)).equals(MemorySegment.NULL)) {
                return false;
            }
            // overwrite = 0: a value set by another thread in between is kept as well. setenv is not
            // safe against a concurrent getenv in native code; this runs once, when MPI mode first
            // loads libmpi, normally before NCCL or MPI have threads of their own.
            return (int) SETENV.invokeExact(name, arena.allocateFrom(""), 0) == 0;
        } catch (Throwable e) {
            throw new IllegalStateException("setenv(" + UCX_ERROR_SIGNALS + ") failed", e);
        }
    }

    /**
     * The JVM signals whose handler is not HotSpot's: signal name and the file the handler lives in.
     *
     * @return one entry per such signal, in signal order; empty when HotSpot handles them all
     */
    public static List<Foreign> foreignHandlers() {
        List<Foreign> foreign = new ArrayList<>();
        try (Arena arena = Arena.ofConfined()) {
            for (int signal : JVM_SIGNALS.keySet()) {
                MemorySegment handler = handler(signal, arena);
                if (handler.address() <= LAST_SPECIAL_HANDLER) {
                    foreign.add(new Foreign(signal, JVM_SIGNALS.get(signal), handler.address(), "(no handler)"));
                    continue;
                }
                String file = fileOf(handler, arena);
                if (!isHotSpot(file)) {
                    foreign.add(new Foreign(signal, JVM_SIGNALS.get(signal), handler.address(), file));
                }
            }
        }
        return List.copyOf(foreign);
    }

    /**
     * Hands every JVM signal whose handler lives in UCX back to the handler UCX replaced (UCX's
     * {@code ucs_debug_disable_signal}).
     *
     * @return the signals handed back, and those still foreign afterwards (not UCX's, or UCX's
     *     without that function)
     */
    public static Restored restoreJvmHandlers() {
        List<Foreign> handedBack = new ArrayList<>();
        for (Foreign foreign : foreignHandlers()) {
            Optional<MethodHandle> disable = ucsDisableSignal(foreign.file());
            if (disable.isPresent()) {
                try {
                    disable.get().invokeExact(foreign.signal());
                } catch (Throwable e) {
                    throw new IllegalStateException("ucs_debug_disable_signal(" + foreign.name() + ") failed", e);
                }
                handedBack.add(foreign);
            }
        }
        return new Restored(List.copyOf(handedBack), foreignHandlers());
    }

    private static Optional<MethodHandle> ucsDisableSignal(String file) {
        if (!Path.of(file).getFileName().toString().startsWith("libucs.so")) {
            return Optional.empty();
        }
        // The library is loaded already (its handler is installed); this takes one more reference.
        return SymbolLookup.libraryLookup(Path.of(file), Arena.global()).find("ucs_debug_disable_signal")
                .map(address -> Libc.linker().downcallHandle(address, FunctionDescriptor.ofVoid(JAVA_INT)));
    }

    private static MemorySegment handler(int signal, Arena arena) {
        MemorySegment action = arena.allocate(SIGACTION_BYTES);
        int result;
        try {
            result = (int) SIGACTION.invokeExact(signal, MemorySegment.NULL, action);
        } catch (Throwable e) {
            throw new IllegalStateException("sigaction(" + signal + ") failed", e);
        }
        if (result != 0) {
            throw new IllegalStateException("sigaction(" + signal + ", NULL, &old) returned " + result);
        }
        return action.get(ADDRESS, 0);
    }

    private static String fileOf(MemorySegment address, Arena arena) {
        MemorySegment info = arena.allocate(DL_INFO_BYTES);
        try {
            if ((int) DLADDR.invokeExact(address, info) == 0) {
                return "(no loaded file)";
            }
        } catch (Throwable e) {
            throw new IllegalStateException("dladdr failed", e);
        }
        MemorySegment name = info.get(ADDRESS, 0);
        return name.equals(MemorySegment.NULL) ? "(no loaded file)" : name.reinterpret(4096).getString(0);
    }

    /** HotSpot's own library (also libjsig, whose chaining keeps HotSpot first when preloaded). */
    private static boolean isHotSpot(String file) {
        Path name = Path.of(file).getFileName();
        return name != null && (name.toString().equals("libjvm.so") || name.toString().equals("libjsig.so"));
    }

    /**
     * A JVM signal whose handler is not HotSpot's.
     *
     * @param signal  the signal number
     * @param name    its name, e.g. SIGSEGV
     * @param handler the handler's address (0 SIG_DFL, 1 SIG_IGN)
     * @param file    the loaded file that holds the handler
     */
    public record Foreign(int signal, String name, long handler, String file) {
        @Override
        public String toString() {
            return name + " -> " + file;
        }
    }

    /**
     * What {@link #restoreJvmHandlers()} did.
     *
     * @param handedBack the signals handed back from UCX
     * @param stillForeign the signals whose handler is still not HotSpot's
     */
    public record Restored(List<Foreign> handedBack, List<Foreign> stillForeign) {}
}
