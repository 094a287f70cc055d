package dev.jnccl.mpi.internal;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.NativeLibraryException;
import dev.jnccl.bindings.SharedLibrary;
import dev.jnccl.mpi.MpiException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import java.util.function.Supplier;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The MPI ABI adapter: the few MPI functions jnccl calls, for both ABIs in use.
 * <ul>
 *   <li>Open MPI: handles ({@code MPI_Comm}, {@code MPI_Datatype}, ...) are pointers; the predefined
 *       ones are the addresses of global symbols ({@code ompi_mpi_comm_world}, {@code ompi_mpi_byte},
 *       ...).</li>
 *   <li>The MPICH ABI (MPICH, Intel MPI, Cray MPICH, MVAPICH): handles are {@code int}s with fixed
 *       values (from MPICH's mpi.h: {@code MPI_COMM_WORLD} 0x44000000, {@code MPI_BYTE} 0x4c00010d,
 *       {@code MPI_INT} 0x4c000405, {@code MPI_ERRORS_RETURN} 0x54000001).</li>
 * </ul>
 * Which one a library is: it defines {@code ompi_mpi_comm_world} (Open MPI) or not (MPICH ABI).
 * Handles travel as {@link Handle} (a pointer or a sign-extended int), so a communicator made by
 * {@link #split}, {@link #dup} or {@link #idup} is used exactly like {@link #world()}.
 * Every call's result is checked: callers set {@code MPI_ERRORS_RETURN} on their communicators
 * ({@link #setErrorsReturn}), and a failure is an {@link MpiException} with MPI's error string.
 * Not API.
 */
public final class MpiLibrary {
    /** The system property naming the MPI library file: {@value}. */
    public static final String PROPERTY = "jnccl.mpi.library";
    /** The environment variable naming the MPI library file: {@value}. */
    public static final String ENVIRONMENT = "JNCCL_MPI_LIBRARY";
    /** Names handed to the dynamic linker, in order: Open MPI 3+, MPICH ABI (MPICH, Intel MPI, ...), MPICH. */
    static final List<String> LINKER_NAMES = List.of("libmpi.so.40", "libmpi.so.12", "libmpich.so.12");

    /** MPI_THREAD_* levels (the same in both ABIs: 0 .. 3). */
    public static final int THREAD_SINGLE = 0;
    /** MPI_THREAD_MULTIPLE. */
    public static final int THREAD_MULTIPLE = 3;
    /** MPI_UNDEFINED: the same value in Open MPI's and in the MPICH ABI's mpi.h (a color for "no group"). */
    public static final int UNDEFINED = -32766;
    private static final List<String> THREAD_LEVELS = List.of("MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED",
            "MPI_THREAD_SERIALIZED", "MPI_THREAD_MULTIPLE");
    /** Larger than MPI_MAX_ERROR_STRING of both ABIs (Open MPI 256, MPICH 512). */
    private static final int ERROR_STRING_BYTES = 1024;
    /** Room for an MPI_Status of either ABI (Open MPI 24 bytes, MPICH 20): read by nobody. */
    private static final int STATUS_BYTES = 64;
    /** Buffers of operations abandoned at a deadline or interrupt: MPI may write them until the job ends. */
    private static final List<Arena> ABANDONED = new ArrayList<>();
    /** Larger than MPI_MAX_PROCESSOR_NAME of both ABIs (Open MPI 256, MPICH 128). */
    private static final int PROCESSOR_NAME_BYTES = 1024;
    /** MPI_MAX_LIBRARY_VERSION_STRING of MPICH (Open MPI: 256). */
    private static final int VERSION_STRING_BYTES = 8192;

    /** The ABI of the loaded library. */
    public enum Abi {
        /** Open MPI: pointer handles. */
        OPEN_MPI("Open MPI ABI"),
        /** MPICH, Intel MPI, Cray MPICH, MVAPICH: integer handles. */
        MPICH("MPICH ABI");

        private final String label;

        Abi(String label) {
            this.label = label;
        }

        @Override
        public String toString() {
            return label;
        }
    }

    /** An MPI handle (MPI_Comm, MPI_Datatype, MPI_Errhandler, MPI_Info): a pointer or an int, as a long. */
    public record Handle(long value) {}

    private static volatile MpiLibrary instance;

    private final SharedLibrary library;
    private final Abi abi;
    private final MemoryLayout handleLayout;
    private final Handle world;
    private final Handle commNull;
    private final Handle byteType;
    private final Handle intType;
    private final Handle errorsReturn;
    /** MPI_ANY_SOURCE: -1 in Open MPI's mpi.h, -2 in the MPICH ABI's. */
    private final int anySource;
    /** Sends of {@link #post} that MPI may not have completed yet, each with its buffers. */
    private final List<Posted> posted = new ArrayList<>();
    private final Map<String, MethodHandle> functions = new HashMap<>();
    /** The rank in MPI_COMM_WORLD for messages, once known. */
    private volatile int rank = -1;

    private MpiLibrary(SharedLibrary library) {
        this.library = library;
        boolean openMpi = library.symbols().find("ompi_mpi_comm_world").isPresent();
        this.abi = openMpi ? Abi.OPEN_MPI : Abi.MPICH;
        if (openMpi) {
            handleLayout = ADDRESS;
            world = symbolHandle("ompi_mpi_comm_world");
            commNull = symbolHandle("ompi_mpi_comm_null");
            byteType = symbolHandle("ompi_mpi_byte");
            intType = symbolHandle("ompi_mpi_int");
            errorsReturn = symbolHandle("ompi_mpi_errors_return");
            anySource = -1;
        } else {
            handleLayout = JAVA_INT;
            world = new Handle(0x44000000);
            commNull = new Handle(0x04000000);
            byteType = new Handle(0x4c00010d);
            intType = new Handle(0x4c000405);
            errorsReturn = new Handle(0x54000001);
            anySource = -2;
            if (library.symbols().find("MPI_Comm_idup").isEmpty()) {
                throw new NativeLibraryException(library.path() + " (" + library.origin() + ") is neither Open MPI (no"
                        + " ompi_mpi_comm_world) nor an MPI-3 library of the MPICH ABI (no MPI_Comm_idup). Set -D"
                        + PROPERTY + "=/path/to/libmpi.so of Open MPI or MPICH.", null);
            }
        }
    }

    /**
     * The MPI library of this process, loaded once: {@value #PROPERTY} / {@value #ENVIRONMENT}, else
     * the dynamic linker's names ({@code libmpi.so.40}, {@code libmpi.so.12}, {@code libmpich.so.12}).
     *
     * @return the adapter
     * @throws NativeLibraryException when no MPI library can be loaded (the message lists every place tried)
     */
    public static MpiLibrary load() {
        MpiLibrary result = instance;
        if (result != null) {
            return result;
        }
        synchronized (MpiLibrary.class) {
            if (instance == null) {
                SharedLibrary library;
                // Before the load: UCX installs its SIGSEGV/SIGBUS/... handlers from its constructor.
                JvmSignalHandlers.keepUcxAway();
                try {
                    library = SharedLibrary.load("MPI (libmpi)", PROPERTY, ENVIRONMENT, LINKER_NAMES,
                            "Install an MPI library (Open MPI: openmpi-bin libopenmpi-dev; MPICH: mpich libmpich-dev),"
                                    + " add its lib directory to LD_LIBRARY_PATH, or set -D" + PROPERTY
                                    + "=/path/to/libmpi.so.40 (environment: " + ENVIRONMENT + "). Use the library"
                                    + " of the mpirun that starts the job.");
                } catch (dev.jnccl.bindings.NativeLibraryException e) { // handed on as the API's type
                    throw new NativeLibraryException(e.getMessage(), e);
                }
                instance = new MpiLibrary(library);
            }
            return instance;
        }
    }

    private Handle symbolHandle(String symbol) {
        MemorySegment address = library.symbols().find(symbol).orElseThrow(() -> new NativeLibraryException(
                library.path() + " defines ompi_mpi_comm_world but not " + symbol + ": not an Open MPI this adapter"
                        + " knows", null));
        return new Handle(address.address());
    }

    // ---------------------------------------------------------------- identity

    /** {@return which ABI the library has} */
    public Abi abi() {
        return abi;
    }

    /** {@return the library file and how it was found} */
    public String describe() {
        return library.path() + " (" + library.origin() + ")";
    }

    /** {@return MPI_COMM_WORLD} */
    public Handle world() {
        return world;
    }

    /** {@return MPI_COMM_NULL} */
    public Handle commNull() {
        return commNull;
    }

    /**
     * Sets the rank used in exception messages (the rank in MPI_COMM_WORLD).
     *
     * @param worldRank this process's rank
     */
    public void rememberRank(int worldRank) {
        this.rank = worldRank;
    }

    /** {@return the name of a thread level, e.g. MPI_THREAD_MULTIPLE} */
    public static String threadLevelName(int level) {
        return level >= 0 && level < THREAD_LEVELS.size() ? THREAD_LEVELS.get(level) : "thread level " + level;
    }

    // ---------------------------------------------------------------- calls

    /** Argument kinds of a signature: H handle, I int, P pointer. */
    private synchronized MethodHandle function(String name, String signature) {
        return functions.computeIfAbsent(name, n -> {
            MemorySegment address = library.symbols().find(n).orElseThrow(() -> new NativeLibraryException(
                    describe() + " has no " + n + ": not a complete MPI library", null));
            MemoryLayout[] arguments = new MemoryLayout[signature.length()];
            for (int i = 0; i < arguments.length; i++) {
                arguments[i] = switch (signature.charAt(i)) {
                    case 'H' -> handleLayout;
                    case 'I' -> JAVA_INT;
                    case 'P' -> ADDRESS;
                    default -> throw new IllegalArgumentException(signature);
                };
            }
            return Linker.nativeLinker().downcallHandle(address, FunctionDescriptor.of(JAVA_INT, arguments));
        });
    }

    /** Calls {@code name}; {@link Handle} arguments become the ABI's handle type. Returns the MPI result code. */
    private int invoke(String name, String signature, Object... arguments) {
        MethodHandle handle = function(name, signature);
        List<Object> converted = new ArrayList<>(arguments.length);
        for (Object argument : arguments) {
            if (argument instanceof Handle h) {
                converted.add(abi == Abi.OPEN_MPI ? (Object) MemorySegment.ofAddress(h.value()) : (Object) (int) h.value());
            } else {
                converted.add(argument);
            }
        }
        try {
            return (int) handle.invokeWithArguments(converted);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException(name + " could not be called", t);
        }
    }

    private void call(String name, String signature, Object... arguments) {
        int code = invoke(name, signature, arguments);
        if (code != 0) {
            throw new MpiException(name, code, errorString(code), rank);
        }
    }

    /**
     * MPI_Error_string's text for {@code code}.
     *
     * @param code an MPI error code
     * @return the text, or a note that MPI had none
     */
    public String errorString(int code) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment text = arena.allocate(ERROR_STRING_BYTES);
            MemorySegment length = arena.allocate(JAVA_INT);
            if (invoke("MPI_Error_string", "IPP", code, text, length) != 0) {
                return "(MPI_Error_string knows no text for " + code + ")";
            }
            int n = Math.clamp(length.get(JAVA_INT, 0), 0, ERROR_STRING_BYTES - 1);
            return new String(text.asSlice(0, n).toArray(JAVA_BYTE), java.nio.charset.StandardCharsets.UTF_8).trim();
        }
    }

    private boolean flag(String name) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_INT);
            call(name, "P", out);
            return out.get(JAVA_INT, 0) != 0;
        }
    }

    /** {@return whether MPI_Init or MPI_Init_thread has been called in this process} */
    public boolean initialized() {
        return flag("MPI_Initialized");
    }

    /** {@return whether MPI_Finalize has been called in this process} */
    public boolean finalized() {
        return flag("MPI_Finalized");
    }

    /**
     * MPI_Init_thread(NULL, NULL, required, &provided).
     *
     * @param required the thread level asked for
     * @return the thread level MPI provides
     */
    public int initThread(int required) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment provided = arena.allocate(JAVA_INT);
            call("MPI_Init_thread", "PPIP", MemorySegment.NULL, MemorySegment.NULL, required, provided);
            return provided.get(JAVA_INT, 0);
        }
    }

    /** {@return MPI_Query_thread: the thread level MPI was initialised with} */
    public int queryThread() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment provided = arena.allocate(JAVA_INT);
            call("MPI_Query_thread", "P", provided);
            return provided.get(JAVA_INT, 0);
        }
    }

    /** MPI_Finalize. */
    public void finalizeMpi() {
        call("MPI_Finalize", "");
    }

    /**
     * MPI_Abort: ends every process of {@code comm}'s job (this one included); normally never returns.
     *
     * @param comm the communicator whose processes end
     * @param exitCode the exit code the launcher reports
     */
    public void abort(Handle comm, int exitCode) {
        invoke("MPI_Abort", "HI", comm, exitCode);
    }

    /** {@return MPI_Get_library_version's first line} */
    public String libraryVersion() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment text = arena.allocate(VERSION_STRING_BYTES);
            MemorySegment length = arena.allocate(JAVA_INT);
            if (invoke("MPI_Get_library_version", "PP", text, length) != 0) {
                return "(unknown version)";
            }
            String version = text.getString(0).strip();
            int newline = version.indexOf('\n');
            return (newline < 0 ? version : version.substring(0, newline)).replace(",", "").strip();
        }
    }

    /**
     * MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN): errors come back as codes instead of ending the job.
     *
     * @param comm the communicator
     */
    public void setErrorsReturn(Handle comm) {
        call("MPI_Comm_set_errhandler", "HH", comm, errorsReturn);
    }

    /**
     * MPI_Comm_rank.
     *
     * @param comm the communicator
     * @return this process's rank in it
     */
    public int rank(Handle comm) {
        return intOut("MPI_Comm_rank", comm);
    }

    /**
     * MPI_Comm_size.
     *
     * @param comm the communicator
     * @return its number of processes
     */
    public int size(Handle comm) {
        return intOut("MPI_Comm_size", comm);
    }

    private int intOut(String name, Handle comm) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_INT);
            call(name, "HP", comm, out);
            return out.get(JAVA_INT, 0);
        }
    }

    private Handle handleOut(String name, String signature, Object... argumentsBeforeOut) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(handleLayout);
            Object[] arguments = java.util.Arrays.copyOf(argumentsBeforeOut, argumentsBeforeOut.length + 1);
            arguments[argumentsBeforeOut.length] = out;
            call(name, signature, arguments);
            return readHandle(out);
        }
    }

    private Handle readHandle(MemorySegment out) {
        return new Handle(abi == Abi.OPEN_MPI ? out.get(ADDRESS, 0).address() : out.get(JAVA_INT, 0));
    }

    /**
     * MPI_Comm_dup.
     *
     * @param comm the communicator to duplicate
     * @return the new communicator (free it with {@link #free})
     */
    public Handle dup(Handle comm) {
        return handleOut("MPI_Comm_dup", "HP", comm);
    }

    /**
     * MPI_Comm_split.
     *
     * @param comm the communicator to split
     * @param color the group of this process (MPI_UNDEFINED: none)
     * @param key the order inside the group
     * @return the new communicator, or {@link #commNull()}
     */
    public Handle split(Handle comm, int color, int key) {
        return handleOut("MPI_Comm_split", "HIIP", comm, color, key);
    }

    /**
     * The communicator of {@code members} (ranks of {@code comm}, in this order), made by them alone:
     * MPI_Comm_group, MPI_Group_incl, MPI_Comm_create_group (MPI-3: collective over the group's
     * members only, so ranks of {@code comm} outside it, even dead ones, take no part). Blocking: call
     * it right after a bounded rendezvous of the members.
     *
     * @param comm    the parent communicator
     * @param members the members' ranks in {@code comm}, this process among them
     * @param tag     a tag that tells this creation from others on {@code comm} running at the same time
     * @return the new communicator (free it with {@link #free})
     */
    public Handle createGroup(Handle comm, int[] members, int tag) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment parentGroup = arena.allocate(handleLayout);
            MemorySegment group = arena.allocate(handleLayout);
            call("MPI_Comm_group", "HP", comm, parentGroup);
            try {
                call("MPI_Group_incl", "HIPP", readHandle(parentGroup), members.length,
                        arena.allocateFrom(JAVA_INT, members), group);
                try {
                    return handleOut("MPI_Comm_create_group", "HHIP", comm, readHandle(group), tag);
                } finally {
                    call("MPI_Group_free", "P", group);
                }
            } finally {
                call("MPI_Group_free", "P", parentGroup);
            }
        }
    }

    /**
     * MPI_Comm_idup, waited for as {@code wait} says: the duplicate exists once every process of
     * {@code comm} has called it, and a process that never does ends the wait at its deadline
     * instead of blocking it forever (as MPI_Comm_dup would).
     *
     * @param comm the communicator to duplicate
     * @param wait the bound of the wait
     * @return the new communicator (free it with {@link #free})
     * @throws CommunicatorAbortedException at the deadline, on interrupt or cancellation
     */
    public Handle idup(Handle comm, Wait wait) {
        Arena arena = Arena.ofShared();
        MemorySegment out = arena.allocate(handleLayout); // written by MPI when the request completes
        MemorySegment request = arena.allocate(handleLayout);
        call("MPI_Comm_idup", "HPP", comm, out, request);
        complete(request, arena, wait);
        Handle result = readHandle(out);
        arena.close();
        return result;
    }

    /** {@return MPI_Get_processor_name: the name of this process's node} */
    public String processorName() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment name = arena.allocate(PROCESSOR_NAME_BYTES);
            MemorySegment length = arena.allocate(JAVA_INT);
            call("MPI_Get_processor_name", "PP", name, length);
            int n = Math.clamp(length.get(JAVA_INT, 0), 0, PROCESSOR_NAME_BYTES - 1);
            return new String(name.asSlice(0, n).toArray(JAVA_BYTE), java.nio.charset.StandardCharsets.UTF_8);
        }
    }

    /**
     * MPI_Comm_free.
     *
     * @param comm the communicator to free
     */
    public void free(Handle comm) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment in = arena.allocate(handleLayout);
            if (abi == Abi.OPEN_MPI) {
                in.set(ADDRESS, 0, MemorySegment.ofAddress(comm.value()));
            } else {
                in.set(JAVA_INT, 0, (int) comm.value());
            }
            call("MPI_Comm_free", "P", in);
        }
    }

    /**
     * How long a non-blocking operation may take, and what else ends the wait: an interrupt of the
     * waiting thread, or a reason from {@code cancel} (polled while waiting).
     *
     * @param operation    the caller's name of the operation, for messages
     * @param timeoutNanos the longest wait, {@link Long#MAX_VALUE} for none
     * @param cancel       polled while waiting: a non-null answer ends the wait with that reason at
     *                     once (a caller that must let an operation complete first waits before it answers)
     * @param startNanos   when the wait began ({@link System#nanoTime()}): every step of one
     *                     operation (arrival, lengths, data) shares one deadline
     */
    public record Wait(String operation, long timeoutNanos, Supplier<String> cancel, long startNanos) {
        /**
         * A wait whose deadline counts from now.
         *
         * @param operation    the caller's name of the operation, for messages
         * @param timeoutNanos the longest wait, {@link Long#MAX_VALUE} for none
         * @param cancel       polled while waiting: a non-null answer ends the wait with that reason
         */
        public Wait(String operation, long timeoutNanos, Supplier<String> cancel) {
            this(operation, timeoutNanos, cancel, System.nanoTime());
        }
    }

    /**
     * MPI_Ibarrier, waited for as {@code wait} says.
     *
     * @param comm the communicator
     * @param wait the bound of the wait
     * @throws CommunicatorAbortedException at the deadline, on interrupt or cancellation
     */
    public void barrier(Handle comm, Wait wait) {
        Arena arena = Arena.ofShared();
        MemorySegment request = arena.allocate(handleLayout);
        call("MPI_Ibarrier", "HP", comm, request);
        complete(request, arena, wait);
        arena.close();
    }

    /**
     * What {@link #await} polls: whether the operation is done, who waits, who is missing, and how
     * to let go of what is still pending in MPI.
     */
    private interface Pending {
        /** {@return whether everything completed (MPI_Test on what is still pending)} */
        boolean test();

        /** {@return how messages name the waiting rank} */
        String who();

        /** {@return the ranks that have not arrived (e.g. "ranks [2, 3]"), or null when that is unknown} */
        String absent();

        /** Lets go of the requests still pending (cancelled or freed); their buffers are kept. */
        void abandon();
    }

    /** One request of a non-blocking collective: who is missing is unknown to MPI. */
    private Pending single(MemorySegment request, Arena buffers) {
        MemorySegment flag = buffers.allocate(JAVA_INT);
        MemorySegment status = buffers.allocate(STATUS_BYTES);
        return new Pending() {
            @Override
            public boolean test() {
                call("MPI_Test", "PPP", request, flag, status);
                return flag.get(JAVA_INT, 0) != 0;
            }

            @Override
            public String who() {
                return "rank " + rank;
            }

            @Override
            public String absent() {
                return null;
            }

            @Override
            public void abandon() {
                // A pending collective cannot be cancelled in MPI: the communicator is aborted next.
            }
        };
    }

    /** Polls the single request of a non-blocking collective until it completes: see {@link #await}. */
    private void complete(MemorySegment request, Arena buffers, Wait wait) {
        await(single(request, buffers), buffers, wait);
    }

    /**
     * Polls {@code pending} until it completes (the caller then reads and frees {@code buffers}). A
     * wait that ends otherwise (deadline, interrupt, cancellation) lets go of what it can and keeps
     * {@code buffers} for the rest of the process (MPI may still write them): the caller's
     * communicator is aborted next, which in MPI mode ends the job.
     */
    private void await(Pending pending, Arena buffers, Wait wait) {
        long polls = 0;
        while (true) {
            if (pending.test()) {
                return;
            }
            String reason = null;
            InterruptedException interrupt = null;
            long now = System.nanoTime();
            long waited = now - wait.startNanos();
            String cancelled = wait.cancel().get();
            if (Thread.currentThread().isInterrupted()) {
                interrupt = new InterruptedException();
                String absent = pending.absent();
                reason = absent == null ? " was interrupted (the interrupt status is kept)"
                        : " was interrupted while " + absent + " had not arrived (the interrupt status is kept)";
            } else if (cancelled != null) {
                reason = " ended: " + cancelled;
            } else if (waited >= wait.timeoutNanos()) {
                String limit = " within " + TimeUnit.NANOSECONDS.toMillis(wait.timeoutNanos()) + " ms";
                String absent = pending.absent();
                reason = absent == null ? " did not complete" + limit : ": " + absent + " did not arrive" + limit;
            }
            if (reason != null) {
                try {
                    pending.abandon();
                } finally {
                    synchronized (ABANDONED) {
                        ABANDONED.add(buffers); // MPI may still write them until the job ends
                    }
                }
                throw new CommunicatorAbortedException(wait.operation() + " on " + pending.who() + reason, interrupt);
            }
            // Host-side waits are rare and short: spin a little, then park (no core burnt waiting).
            if (polls++ < 64) {
                Thread.onSpinWait();
            } else {
                LockSupport.parkNanos(polls < 1024 ? 20_000 : 200_000);
            }
        }
    }

    /**
     * A rendezvous that names the ranks that did not come: a zero-byte MPI_Isend to every other
     * rank of {@code comm} and an MPI_Irecv from each, all with {@code tag}, polled until every one
     * completed. A rank leaves only when every other rank's message has arrived, each sent on
     * entering: so this is a barrier, and at the deadline the ranks whose message is missing are
     * exactly the ones that have not entered it. Costs 2 (size - 1) requests and size - 1 messages
     * on each rank (O(size) per rank, O(size²) in the job), host-side only. Left at the deadline, an
     * interrupt or cancellation: the receives are cancelled (MPI_Cancel) and every pending request
     * freed (MPI_Request_free); a late rank's message then finds no receive, so callers give every
     * rendezvous of a communicator its own tag (a sequence number) that no earlier one used.
     *
     * @param comm  the communicator ({@code rank} and {@code size} are this process's in it)
     * @param rank  this process's rank in {@code comm}
     * @param size  the size of {@code comm}
     * @param tag   the tag of this rendezvous's messages (unused by anything else on {@code comm})
     * @param who   how messages name this rank (e.g. "rank 3 (rank 1 of a split)")
     * @param scope appended to the absent ranks in messages (e.g. " of the split"), or ""
     * @param wait  the bound of the wait
     * @throws CommunicatorAbortedException at the deadline, on interrupt or cancellation, naming the
     *         ranks that had not arrived
     */
    public void arrive(Handle comm, int rank, int size, int tag, String who, String scope, Wait wait) {
        int[] others = new int[size - 1];
        for (int i = 0; i < others.length; i++) {
            others[i] = i < rank ? i : i + 1;
        }
        arrive(comm, others, tag, who, scope, wait);
    }

    /**
     * {@link #arrive(Handle, int, int, int, String, String, Wait)} among this process and
     * {@code others} only (ranks of {@code comm}): no message goes to or waits for any other rank of
     * {@code comm}, which may be dead (the survivors of a lost rank meet this way).
     *
     * @param comm   the communicator
     * @param others the other ranks of {@code comm} that take part (not this process)
     * @param tag    the tag of this rendezvous's messages (unused by anything else on {@code comm})
     * @param who    how messages name this rank
     * @param scope  appended to the absent ranks in messages, or ""
     * @param wait   the bound of the wait
     * @throws CommunicatorAbortedException at the deadline, on interrupt or cancellation, naming the
     *         ranks that had not arrived
     */
    public void arrive(Handle comm, int[] others, int tag, String who, String scope, Wait wait) {
        if (others.length == 0) {
            return;
        }
        Arena arena = Arena.ofShared();
        int peers = others.length;
        long requestBytes = handleLayout.byteSize();
        // Receives in [0, peers), sends in [peers, 2 peers); index i talks to rank others[i].
        MemorySegment requests = arena.allocate(requestBytes * 2 * peers, handleLayout.byteAlignment());
        MemorySegment buffer = arena.allocate(1); // zero bytes travel: one valid address for all
        MemorySegment flag = arena.allocate(JAVA_INT);
        MemorySegment status = arena.allocate(STATUS_BYTES);
        boolean[] done = new boolean[2 * peers];
        for (int i = 0; i < peers; i++) {
            int peer = others[i];
            call("MPI_Irecv", "PIHIIHP", buffer, 0, byteType, peer, tag, comm,
                    requests.asSlice(i * requestBytes, requestBytes));
        }
        for (int i = 0; i < peers; i++) {
            int peer = others[i];
            call("MPI_Isend", "PIHIIHP", buffer, 0, byteType, peer, tag, comm,
                    requests.asSlice((peers + i) * requestBytes, requestBytes));
        }
        await(new Pending() {
            @Override
            public boolean test() {
                boolean all = true;
                for (int i = 0; i < done.length; i++) {
                    if (!done[i]) {
                        call("MPI_Test", "PPP", requests.asSlice(i * requestBytes, requestBytes), flag, status);
                        done[i] = flag.get(JAVA_INT, 0) != 0;
                        all &= done[i];
                    }
                }
                return all;
            }

            @Override
            public String who() {
                return who;
            }

            @Override
            public String absent() {
                List<Integer> missing = new ArrayList<>();
                for (int i = 0; i < peers; i++) {
                    if (!done[i]) {
                        missing.add(others[i]);
                    }
                }
                if (missing.isEmpty()) {
                    // Every rank arrived, but a send to one is still pending (MPI makes no progress).
                    return null;
                }
                return (missing.size() == 1 ? "rank " + missing.getFirst() : "ranks " + missing) + scope;
            }

            @Override
            public void abandon() {
                for (int i = 0; i < done.length; i++) {
                    if (!done[i]) {
                        MemorySegment request = requests.asSlice(i * requestBytes, requestBytes);
                        if (i < peers) {
                            invoke("MPI_Cancel", "P", request); // a receive; sends complete in the background
                        }
                        invoke("MPI_Request_free", "P", request);
                    }
                }
            }
        }, arena, wait);
        arena.close();
    }

    /**
     * Sends {@code value} to {@code dest} with {@code tag} (MPI_Send of 8 bytes: eager, it returns
     * at once).
     *
     * @param value the value
     * @param dest  the receiving rank in {@code comm}
     * @param tag   the tag
     * @param comm  the communicator
     */
    public void sendLong(long value, int dest, int tag, Handle comm) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buffer = arena.allocateFrom(JAVA_LONG, value);
            call("MPI_Send", "PIHIIH", buffer, Long.BYTES, byteType, dest, tag, comm);
        }
    }

    /**
     * The value {@code source} sent with {@code tag}, if one has arrived (MPI_Iprobe, then MPI_Recv).
     *
     * @param source the sending rank in {@code comm}
     * @param tag    the tag
     * @param comm   the communicator
     * @return the value, or empty when none has arrived
     */
    public java.util.OptionalLong receiveLong(int source, int tag, Handle comm) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment flag = arena.allocate(JAVA_INT);
            MemorySegment status = arena.allocate(STATUS_BYTES);
            call("MPI_Iprobe", "IIHPP", source, tag, comm, flag, status);
            if (flag.get(JAVA_INT, 0) == 0) {
                return java.util.OptionalLong.empty();
            }
            MemorySegment buffer = arena.allocate(JAVA_LONG);
            call("MPI_Recv", "PIHIIHP", buffer, Long.BYTES, byteType, source, tag, comm, status);
            return java.util.OptionalLong.of(buffer.get(JAVA_LONG, 0));
        }
    }

    /** A send of {@link #post}: its request and buffers, kept until MPI completes it. */
    private record Posted(Arena arena, MemorySegment request, MemorySegment flag, MemorySegment status) {}

    /**
     * Sends {@code bytes} to {@code dest} with {@code tag} without waiting (MPI_Isend): the buffer is
     * kept until MPI has sent it (each later post tests the earlier ones), so a receiver that never
     * receives costs a little memory, never a wait. For the rare messages of failure handling.
     *
     * @param bytes the message
     * @param dest  the receiving rank in {@code comm}
     * @param tag   the tag
     * @param comm  the communicator
     */
    public void post(byte[] bytes, int dest, int tag, Handle comm) {
        synchronized (posted) {
            posted.removeIf(earlier -> {
                call("MPI_Test", "PPP", earlier.request(), earlier.flag(), earlier.status());
                boolean done = earlier.flag().get(JAVA_INT, 0) != 0;
                if (done) {
                    earlier.arena().close();
                }
                return done;
            });
            Arena arena = Arena.ofShared();
            Posted send = new Posted(arena, arena.allocate(handleLayout), arena.allocate(JAVA_INT),
                    arena.allocate(STATUS_BYTES));
            try {
                call("MPI_Isend", "PIHIIHP", segmentOf(arena, bytes), bytes.length, byteType, dest, tag, comm,
                        send.request());
            } catch (RuntimeException e) {
                arena.close();
                throw e;
            }
            posted.add(send);
        }
    }

    /**
     * The next message with {@code tag} from any rank of {@code comm}, if one has arrived
     * (MPI_Improbe, MPI_Get_count, MPI_Mrecv: matched and received as one, so that two threads
     * receiving the same tag never take each other's message); never waits.
     *
     * @param tag  the tag
     * @param comm the communicator
     * @return the message, or empty when none has arrived
     */
    public java.util.Optional<byte[]> receiveAny(int tag, Handle comm) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment flag = arena.allocate(JAVA_INT);
            MemorySegment message = arena.allocate(handleLayout);
            MemorySegment status = arena.allocate(STATUS_BYTES);
            call("MPI_Improbe", "IIHPPP", anySource, tag, comm, flag, message, status);
            if (flag.get(JAVA_INT, 0) == 0) {
                return java.util.Optional.empty();
            }
            MemorySegment count = arena.allocate(JAVA_INT);
            call("MPI_Get_count", "PHP", status, byteType, count);
            int length = count.get(JAVA_INT, 0);
            MemorySegment buffer = arena.allocate(Math.max(1, length));
            call("MPI_Mrecv", "PIHPP", buffer, length, byteType, message, status);
            return java.util.Optional.of(buffer.asSlice(0, length).toArray(JAVA_BYTE));
        }
    }

    /**
     * MPI_Bcast of bytes from {@code root}.
     *
     * @param bytes the root's bytes (sent) or the buffer that receives them (same length everywhere)
     * @param root the sending rank
     * @param comm the communicator
     */
    public void bcast(byte[] bytes, int root, Handle comm) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buffer = arena.allocate(Math.max(1, bytes.length));
            MemorySegment.copy(bytes, 0, buffer, JAVA_BYTE, 0, bytes.length);
            call("MPI_Bcast", "PIHIH", buffer, bytes.length, byteType, root, comm);
            MemorySegment.copy(buffer, JAVA_BYTE, 0, bytes, 0, bytes.length);
        }
    }

    /**
     * Every rank's bytes (lengths may differ) on {@code root}: MPI_Igather of the lengths, then
     * MPI_Igatherv, each waited for as {@code wait} says.
     *
     * @param local this rank's bytes
     * @param root the receiving rank
     * @param comm the communicator
     * @param wait the bound of each wait
     * @return every rank's bytes in rank order on {@code root}, an empty list elsewhere
     * @throws CommunicatorAbortedException at the deadline, on interrupt or cancellation
     */
    public List<byte[]> gather(byte[] local, int root, Handle comm, Wait wait) {
        int size = size(comm);
        boolean isRoot = rank(comm) == root;
        Arena lengthsArena = Arena.ofShared();
        MemorySegment length = lengthsArena.allocateFrom(JAVA_INT, local.length);
        MemorySegment lengths = lengthsArena.allocate(JAVA_INT, size);
        MemorySegment request = lengthsArena.allocate(handleLayout);
        call("MPI_Igather", "PIHPIHIHP", length, 1, intType, lengths, 1, intType, root, comm, request);
        int[] counts = new int[size];
        complete(request, lengthsArena, wait);
        if (isRoot) {
            MemorySegment.copy(lengths, JAVA_INT, 0, counts, 0, size);
        }
        lengthsArena.close();
        Arena arena = Arena.ofShared();
        MemorySegment countsSegment = arena.allocateFrom(JAVA_INT, counts);
        MemorySegment displacements = displacements(arena, counts, "gather");
        MemorySegment send = segmentOf(arena, local);
        MemorySegment receive = arena.allocate(Math.max(1, total(counts)));
        MemorySegment request2 = arena.allocate(handleLayout);
        call("MPI_Igatherv", "PIHPPPHIHP", send, local.length, byteType, receive, countsSegment, displacements,
                byteType, root, comm, request2);
        complete(request2, arena, wait);
        try {
            return isRoot ? split(receive, counts) : List.of();
        } finally {
            arena.close();
        }
    }

    /**
     * Every rank's bytes (lengths may differ) on every rank: MPI_Iallgather of the lengths, then
     * MPI_Iallgatherv, each waited for as {@code wait} says.
     *
     * @param local this rank's bytes
     * @param comm the communicator
     * @param wait the bound of each wait
     * @return every rank's bytes, in rank order
     * @throws CommunicatorAbortedException at the deadline, on interrupt or cancellation
     */
    public List<byte[]> allGather(byte[] local, Handle comm, Wait wait) {
        int size = size(comm);
        Arena lengthsArena = Arena.ofShared();
        MemorySegment length = lengthsArena.allocateFrom(JAVA_INT, local.length);
        MemorySegment lengths = lengthsArena.allocate(JAVA_INT, size);
        MemorySegment request = lengthsArena.allocate(handleLayout);
        call("MPI_Iallgather", "PIHPIHHP", length, 1, intType, lengths, 1, intType, comm, request);
        int[] counts = new int[size];
        complete(request, lengthsArena, wait);
        MemorySegment.copy(lengths, JAVA_INT, 0, counts, 0, size);
        lengthsArena.close();
        Arena arena = Arena.ofShared();
        MemorySegment countsSegment = arena.allocateFrom(JAVA_INT, counts);
        MemorySegment displacements = displacements(arena, counts, "allGather");
        MemorySegment send = segmentOf(arena, local);
        MemorySegment receive = arena.allocate(Math.max(1, total(counts)));
        MemorySegment request2 = arena.allocate(handleLayout);
        call("MPI_Iallgatherv", "PIHPPPHHP", send, local.length, byteType, receive, countsSegment, displacements,
                byteType, comm, request2);
        complete(request2, arena, wait);
        try {
            return split(receive, counts);
        } finally {
            arena.close();
        }
    }

    private static MemorySegment segmentOf(Arena arena, byte[] bytes) {
        MemorySegment segment = arena.allocate(Math.max(1, bytes.length));
        MemorySegment.copy(bytes, 0, segment, JAVA_BYTE, 0, bytes.length);
        return segment;
    }

    /** MPI counts and displacements are ints: more than 2 GiB in total cannot be gathered in one call. */
    private static MemorySegment displacements(Arena arena, int[] counts, String operation) {
        MemorySegment displacements = arena.allocate(JAVA_INT, Math.max(1, counts.length));
        long offset = 0;
        for (int i = 0; i < counts.length; i++) {
            if (offset > Integer.MAX_VALUE) {
                throw new IllegalArgumentException(operation + ": " + offset + "+ bytes in total exceed MPI's int"
                        + " displacements (2 GiB)");
            }
            displacements.setAtIndex(JAVA_INT, i, (int) offset);
            offset += counts[i];
        }
        return displacements;
    }

    private static int total(int[] counts) {
        long total = 0;
        for (int count : counts) {
            total += count;
        }
        return Math.toIntExact(total);
    }

    private static List<byte[]> split(MemorySegment receive, int[] counts) {
        List<byte[]> all = new ArrayList<>(counts.length);
        long offset = 0;
        for (int count : counts) {
            all.add(receive.asSlice(offset, count).toArray(JAVA_BYTE));
            offset += count;
        }
        return all;
    }

    @Override
    public String toString() {
        return abi + " " + describe();
    }
}
