package dev.jnccl;

import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.internal.Backoff;
import dev.jnccl.internal.Captures;
import dev.jnccl.internal.Deadlines;
import dev.jnccl.internal.Pins;
import dev.jnccl.internal.Resources;
import dev.jnccl.spi.Command;
import dev.jnccl.spi.Failures;
import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.Membership;
import dev.jnccl.spi.Modes;
import dev.jnccl.spi.NcclHostSide;
import dev.jnccl.spi.RankEvents;
import dev.jnccl.spi.RankParts;
import dev.jnccl.spi.Transport;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.Optional;
import java.util.function.Function;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One rank's NCCL communicator, bound to one CUDA device, with its own comms stream. Work is
 * grouped in {@linkplain #begin(CudaEvent) transactions}; convenience operations cover the common
 * single collectives; host-side helpers ({@link #barrier()}, host gathers) go to the launcher that
 * knows how the ranks meet (threads in one JVM, MPI processes, a single rank).
 *
 * <p><b>Making one.</b> Through a launcher ({@code ThreadsCommunicators}, {@code MpiCommunicators}),
 * {@link #single} for one rank, or {@link #initRank} for a rank of a world whose processes a launcher
 * of the caller's own started (then the host-side helpers run over NCCL itself).
 *
 * <p><b>Threads.</b> Create and use a communicator from the thread whose current CUDA device is
 * {@link #device()} (the factories set it). Calls are serialized internally; {@link #abort},
 * {@link #close}, {@link #isAborted} and the watchdog may act from any thread.
 *
 * <p><b>Lifecycle.</b> Init and close are bounded by the deadlines of {@link CommunicatorOptions}:
 * past a deadline the communicator is aborted instead of hanging the caller. How NCCL is driven
 * (and what each way costs per transaction) is the {@link CommunicatorMode}. After an abort every
 * use throws {@link CommunicatorAbortedException} with the reason. {@link #close()} is idempotent
 * and bounded.
 */
public final class Communicator implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(Communicator.class);

    private enum State { OPEN, ABORTED, CLOSED }

    static {
        Modes.install(Communicator::create);
    }

    private final int rank;
    private final int worldSize;
    private final int device;
    private final CommunicatorOptions options;
    private final LoadedLibraries libraries;
    private final CudaStream stream;
    /** Serializes every call into NCCL and on the comms stream; abort and close take it too. */
    private final ReentrantLock nativeLock;
    private final CudaEvent transactionReady;
    private final CudaEvent commsDone;
    private final FlightRecorder recorder;
    private final Object lifecycle = new Object();
    private final NcclComm comm;
    private final Watchdog watchdog;
    /** How the ranks meet on the host: the launcher's. */
    private final HostSide host;
    /** Where the launcher joins in: attached, paced, split, closing, closed. */
    private final RankEvents events;
    /** How a failure reaches the other ranks: the launcher's. */
    private final Failures failures;
    /** How commands move (NCCL, or a launcher's copies). */
    private final Transport transport;
    /** The bound of host-side waits for the other ranks (barrier, host gathers, pace): see {@link HostSide}. */
    private final long hostTimeoutNanos;
    /** The communicator this one was split from, or null. */
    private final Communicator parent;
    /** Live communicators split from this one; closed before this one. */
    private final Children children = new Children(lifecycle);
    private final Checks checks;
    private final CommandRunner commands;
    /** Registrations not yet closed; the communicator's close drops them. Under the native lock. */
    private final Set<Registration> registrations = new HashSet<>();
    /**
     * The commands of the transactions captured into each CUDA graph (by graph id), in capture
     * order: what {@link #launch(CudaGraph, CudaStream)} runs and the flight recorder lists. Written
     * by the capturing thread holding the native lock; read by launch and close.
     */
    private final Map<Long, List<Command>> capturedByGraph = new ConcurrentHashMap<>();
    /** The graph {@link #launch} replayed last, with its captured commands (see {@link #capturedCommands}). */
    private Replayed lastReplayed;

    private volatile State state = State.OPEN;
    private volatile String abortReason;
    private long sequence;
    /**
     * The open transaction's number, 0 when none is open. Written under the native lock by the
     * thread that owns it; volatile so that another thread using a handle gets the right message.
     */
    private volatile long openNumber;
    /** The thread that began the open transaction (written before {@link #openNumber}). */
    private Thread openOwner;
    /** The event the open transaction's commands wait for. */
    private CudaEvent openReady;
    /** The open transaction's commands: one buffer, reused by every transaction of this communicator. */
    private final CommandBuffer pending = new CommandBuffer();
    /** The communicator's own handle of the open transaction, for the convenience operations. */
    private final Transaction current;
    /** How recent transactions ended, by number modulo the length: +number executed, -number closed unexecuted. */
    private final long[] outcomes = new long[OUTCOMES];
    /** How many transaction outcomes {@link #outcomes} remembers, for the messages of stale handles. */
    private static final int OUTCOMES = 1024;
    /** Transactions executed (counted as their enqueue starts), for the host side's view of how far this rank got. */
    private volatile long executed;

    /** A rank of a new communicator: see {@link Modes#communicator}. */
    private Communicator(UniqueId id, int rank, int worldSize, int device, CommunicatorOptions options,
                         RankParts parts) {
        this(rank, worldSize, device, options, parts, null, new ReentrantLock(),
                lock -> NcclComm.init(Objects.requireNonNull(id, "Communicator: unique id is null"), rank, worldSize,
                        device, options, options.initTimeout(), parts.failures()::cancellation, lock));
    }

    /** A member of a split: takes over the split's NCCL communicator (on failure the caller aborts it). */
    private Communicator(Membership membership, NcclComm childComm, RankParts parts) {
        this(membership.rank(), membership.worldSize(), membership.parent().device(), membership.parent().options(),
                parts, membership.parent(), childComm.lock(), lock -> childComm);
    }

    private Communicator(int rank, int worldSize, int device, CommunicatorOptions options, RankParts parts,
                         Communicator parent, ReentrantLock lock, Function<ReentrantLock, NcclComm> connect) {
        Objects.requireNonNull(options, "Communicator: options are null");
        Objects.requireNonNull(parts, "Communicator: parts are null");
        this.checks = new Checks(rank, worldSize, device);
        this.current = new Transaction(this, Transaction.CURRENT); // after the checks, which it keeps
        this.libraries = checks.libraries();
        this.rank = rank;
        this.worldSize = worldSize;
        this.device = device;
        this.options = options;
        this.host = parts.host();
        this.events = parts.events();
        this.failures = parts.failures();
        this.transport = parts.transport();
        this.hostTimeoutNanos = HostSide.timeoutNanos(options);
        this.parent = parent;
        this.nativeLock = lock;
        this.recorder = new FlightRecorder(options.flightRecorderSize());

        Events.CommInit initEvent = new Events.CommInit();
        initEvent.begin();
        long started = System.nanoTime();
        Cuda.setDevice(device);
        List<AutoCloseable> created = new ArrayList<>();
        try {
            this.stream = Resources.remember(created, CudaStream.create());
            this.transactionReady = Resources.remember(created, CudaEvent.create());
            this.commsDone = Resources.remember(created, CudaEvent.create());
            this.comm = connect.apply(nativeLock);
        } catch (RuntimeException e) {
            created.add(transport::close); // the launcher's transport was made for this communicator
            Resources.closeAll(created, e, LOG);
            throw e;
        }
        this.commands = new CommandRunner(comm, stream, libraries, transport, rank, worldSize);
        long initMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
        LOG.info("jnccl communicator ready: rank {} of {}{}, device {}, backend {}, mode {}, NCCL {}, CUDA runtime {}"
                        + " (driver {}), init {} ms", rank, worldSize, parent == null ? "" : " (split of rank "
                        + parent.rank + " of " + parent.worldSize + ")", device, libraries.backend().id(), options.mode(),
                LibraryVersion.of(libraries.ncclVersion()), LibraryVersion.of(libraries.cudaRuntimeVersion()),
                LibraryVersion.of(libraries.cudaDriverVersion()), initMillis);
        initEvent.commit(rank, worldSize, device, libraries.backend().id(),
                LibraryVersion.of(libraries.ncclVersion()).toString());
        watchdog = options.watchdogEnabled()
                ? new Watchdog(rank, comm, stream, recorder, options.watchdogTimeout(), options.watchdogInterval(),
                        () -> state == State.OPEN, this::abort, pendingNanos -> failures.poll(executed, pendingNanos))
                : null;
    }

    /** The constructor behind {@link Modes#communicator}: this rank's communicator, handed to its host side. */
    private static Communicator create(UniqueId id, int rank, int worldSize, int device, CommunicatorOptions options,
                                       RankParts parts) {
        Objects.requireNonNull(parts, "Communicator: parts are null");
        return attach(new Communicator(id, rank, worldSize, device, options, parts));
    }

    private static Communicator attach(Communicator communicator) {
        try {
            communicator.events.attached(communicator);
        } catch (RuntimeException | Error e) {
            communicator.abort("its launcher refused it: " + e);
            communicator.close();
            throw e;
        }
        return communicator;
    }

    /**
     * A world-1 communicator on {@code device} for single-GPU code paths: same API, no MPI, no
     * threads. Host-side helpers are trivial.
     *
     * @param device the CUDA device
     * @return the communicator, to be closed by the caller
     */
    public static Communicator single(int device) {
        return single(device, CommunicatorOptions.defaults());
    }

    /**
     * A world-1 communicator on {@code device} with {@code options}. See {@link #single(int)}.
     *
     * @param device the CUDA device
     * @param options deadlines and diagnostics
     * @return the communicator, to be closed by the caller
     */
    public static Communicator single(int device, CommunicatorOptions options) {
        return create(UniqueId.generate(), 0, 1, device, options, new RankParts(HostSides.SINGLE, Transport.NCCL));
    }

    /**
     * Rank {@code rank} of a world of {@code worldSize} ranks that meet only through {@code id}
     * (NCCL's {@code ncclCommInitRank}): for processes a launcher of the caller's own started
     * (a scheduler, a container orchestrator), which hands the id from rank 0 to the others. Waits,
     * up to {@link CommunicatorOptions#initTimeout()}, for every rank to join.
     *
     * <p>Transactions and convenience operations work as with any launcher. With no host channel
     * between the ranks, the host-side helpers run over this communicator's own NCCL collectives
     * ({@link dev.jnccl.spi.NcclHostSide}): {@link #barrier()} is a one-element all-reduce, the host
     * gathers an all-gather of the lengths and then of the padded bytes, {@link #split} exchanges the
     * colors and keys the same way. Each is a transaction of this communicator (so none may be open
     * on the calling thread) and waits at most the watchdog's timeout. A rank that aborts cannot tell
     * the others: they end when NCCL fails their collective or, at the latest, when their own
     * watchdog (or host-side timeout) fires.
     *
     * @param id        the unique id, made by one rank with {@link UniqueId#generate()} and given to all
     * @param rank      this rank, in {@code [0, worldSize)}
     * @param worldSize the number of ranks
     * @param device    the CUDA device of this rank (made the calling thread's current device)
     * @param options   deadlines and diagnostics
     * @return the communicator, to be closed by the caller
     * @throws IllegalArgumentException     for a bad rank, world size or device, before any native call
     * @throws NcclException                when NCCL refuses the communicator
     * @throws CommunicatorAbortedException when the other ranks did not join before the deadline
     */
    public static Communicator initRank(UniqueId id, int rank, int worldSize, int device,
                                        CommunicatorOptions options) {
        return create(id, rank, worldSize, device, options, NcclHostSide.parts(() -> null));
    }

    // ---------------------------------------------------------------- identity

    /**
     * This rank, in {@code [0, worldSize())}.
     *
     * @return this rank
     */
    public int rank() {
        return rank;
    }

    /**
     * The number of ranks.
     *
     * @return the number of ranks
     */
    public int worldSize() {
        return worldSize;
    }

    /** {@return the CUDA device of this rank} */
    public int device() {
        return device;
    }

    /** {@return the comms stream: all communication of this communicator runs on it, in order} */
    public CudaStream stream() {
        return stream;
    }

    /** {@return the NCCL version in use, e.g. "2.28.3"} */
    public String ncclVersion() {
        return LibraryVersion.of(libraries.ncclVersion()).toString();
    }

    /** {@return {@link Backend#CUDA} (real NCCL) or {@link Backend#HOST} (the host emulation); see {@link JncclRuntime}} */
    public Backend backend() {
        return JncclRuntime.backendOf(libraries);
    }

    /**
     * The options this communicator was created with.
     *
     * @return the options
     */
    public CommunicatorOptions options() {
        return options;
    }

    /**
     * Whether the communicator was aborted (by {@link #abort}, a deadline or the watchdog).
     *
     * @return whether it was aborted
     */
    public boolean isAborted() {
        return state == State.ABORTED;
    }

    /**
     * Whether {@link #close()} has run.
     *
     * @return whether it is closed
     */
    public boolean isClosed() {
        return state == State.CLOSED;
    }

    /** {@return why the communicator was aborted, or null} */
    public String abortReason() {
        return abortReason;
    }

    /** {@return the flight recorder's dump of the most recent transactions (for diagnostics)} */
    public String recentTransactions() {
        return recorder.dump();
    }

    // ---------------------------------------------------------------- transactions

    /**
     * Starts a transaction whose commands run after {@code ready} (recorded on any stream, any device).
     *
     * @param ready the event the commands wait for
     * @return the open transaction; execute or close it
     */
    public Transaction begin(CudaEvent ready) {
        Objects.requireNonNull(ready, "begin: ready event is null");
        if (ready.isClosed()) {
            throw closedReady(ready);
        }
        return new Transaction(this, open("begin", ready));
    }

    /** Out of line, as in {@link #requireUsable}: begin must stay small enough to inline. */
    private static IllegalStateException closedReady(CudaEvent ready) {
        return new IllegalStateException("begin: ready event " + ready + " is closed");
    }

    /**
     * Starts a transaction whose commands run after all work enqueued on {@code waitFor} so far.
     *
     * @param waitFor the stream whose work so far the commands wait for
     * @return the open transaction; execute or close it
     */
    public Transaction begin(CudaStream waitFor) {
        checks.requireStream("begin", waitFor);
        nativeLock.lock();
        try {
            requireUsable("begin");
            requireNoOpenTransaction("begin");
            waitFor.record(transactionReady);
        } finally {
            nativeLock.unlock();
        }
        return new Transaction(this, open("begin", transactionReady));
    }

    /** Opens a transaction on the calling thread; {@return its number}. */
    private long open(String operation, CudaEvent ready) {
        nativeLock.lock();
        try {
            requireUsable(operation);
            requireNoOpenTransaction(operation);
            long number = ++sequence;
            pending.clear();
            openReady = ready;
            openOwner = Thread.currentThread();
            openNumber = number;
            return number;
        } finally {
            nativeLock.unlock();
        }
    }

    private void requireNoOpenTransaction(String operation) {
        long open = openNumber;
        if (open != 0) {
            throw stillOpen(operation, open);
        }
    }

    private IllegalStateException stillOpen(String operation, long open) {
        return new IllegalStateException(operation + ": transaction #" + open + " of rank " + rank
                + " is still open; execute or close it first");
    }

    /** Ends the open transaction {@code number} (executed or discarded), if it is still the open one. */
    private void transactionEnded(long number, boolean executed) {
        nativeLock.lock();
        try {
            if (openNumber == number) {
                outcomes[(int) (number % OUTCOMES)] = executed ? number : -number;
                openNumber = 0;
                openReady = null;
                // openOwner stays: a handle used from another thread meanwhile may have read the number before.
            }
        } finally {
            nativeLock.unlock();
        }
    }

    // ---------------------------------------------------------------- transaction handles

    /** {@return the communicator's own handle of the open transaction, which the users' handles delegate to} */
    Transaction currentTransaction() {
        return current;
    }

    /** {@return the open transaction's commands (for its handle)} */
    CommandBuffer pendingCommands() {
        return pending;
    }

    /** {@return the open transaction's number, 0 when none is open} */
    long openTransactionNumber() {
        return openNumber;
    }

    /** {@return whether the transaction of handle {@code number} is the open one} */
    boolean isOpenTransaction(long number) {
        long open = openNumber;
        return open != 0 && (number == Transaction.CURRENT || number == open);
    }

    /**
     * A command, execute or close of the transaction of handle {@code number}: it must be the open
     * one, used from the thread that began it, on a usable communicator.
     */
    void requireOpenTransaction(String operation, long number) {
        long open = openNumber;
        if (open != 0 && (number == Transaction.CURRENT || number == open)) {
            if (Thread.currentThread() != openOwner) {
                throw wrongThread(operation, open);
            }
            requireUsable(operation);
            return;
        }
        throw ended(operation, number);
    }

    private IllegalStateException wrongThread(String operation, long open) {
        return new IllegalStateException(operation + ": transaction #" + open + " of rank " + rank
                + " belongs to thread \"" + openOwner.getName() + "\" that began it; it was used from thread \""
                + Thread.currentThread().getName() + "\"");
    }

    private IllegalStateException ended(String operation, long number) {
        return new IllegalStateException(operation + ": transaction #" + number + " of rank " + rank + " "
                + transactionOutcome(number));
    }

    /** {@return how transaction {@code number}, no longer open, ended, as the end of a sentence} */
    String transactionOutcome(long number) {
        long outcome = outcomes[(int) (Math.max(number, 0) % OUTCOMES)];
        if (outcome == number) {
            return "was already executed";
        }
        if (outcome == -number) {
            return "was closed without executing";
        }
        return "has ended (executed or closed; transaction #" + sequence + " is the newest)";
    }

    /** A handle's close: discards the transaction {@code number} if it is still open; nothing otherwise. */
    void closeTransaction(long number) {
        long open = openNumber;
        if (open == 0 || (number != Transaction.CURRENT && number != open)) {
            return;
        }
        if (Thread.currentThread() != openOwner) {
            throw wrongThread("close", open);
        }
        pending.clear();
        transactionEnded(open, false);
    }

    /** Executes the open transaction (its handle checked it): see {@link Transaction#execute}. */
    void execute(CudaEvent signal) {
        long number = openNumber;
        CudaEvent ready = openReady;
        // No event object while JFR does not record it: the hot path allocates nothing.
        Events.Transaction event = Events.transactionEnabled() ? new Events.Transaction() : null;
        if (event != null) {
            event.begin();
        }
        CommandBuffer buffer = pending;
        List<Command> executed = buffer.view();
        try {
            requireUsable("execute");
            // Outside the lock: the launcher may wait here for slower ranks, and an abort from
            // another thread (a failing pack, the watchdog) must not wait for this one meanwhile.
            // Called directly, not through onHost: no lambda per transaction on the hot path.
            if (Captures.currentCaptureId() == 0) {
                events.pace(hostTimeoutNanos);
            }
            // Inside a capture the pace is skipped: a captured transaction puts nothing in the launch
            // queue the pace bounds (it runs only in the graph's replays), and each replay is paced
            // once by launch(graph, stream); every rank capturing the same step skips the same count.
        } catch (RuntimeException e) {
            if (e instanceof CommunicatorAbortedException) {
                abort(e.getMessage()); // as onHost does
            }
            buffer.clear();
            transactionEnded(number, true);
            throw e;
        }
        long graph;
        nativeLock.lock();
        try {
            transactionEnded(number, true);
            requireUsable("execute");
            graph = enqueue(number, ready, signal, buffer, executed);
            if (LOG.isDebugEnabled() || (event != null && event.shouldCommit())) {
                // The buffer serves the next transaction, which another thread may open once the lock is free.
                executed = List.copyOf(executed);
            }
        } finally {
            nativeLock.unlock();
        }
        if (LOG.isDebugEnabled()) {
            LOG.debug("rank {} transaction #{}{}: {} command(s), {} bytes: {}", rank, number,
                    graph == 0 ? "" : " (captured into graph #" + graph + ")", executed.size(),
                    CommandRunner.bytes(executed), executed);
        }
        // Sizes summed only when JFR records it.
        if (event != null && event.shouldCommit()) {
            event.commit(rank, number, executed, graph == 0 ? "" : "captured into graph #" + graph);
        }
    }

    /** Enqueues the transaction; returns the id of the graph it was captured into, 0 when it runs. */
    private long enqueue(long number, CudaEvent ready, CudaEvent signal, CommandBuffer buffer,
                         List<Command> executed) {
        // A ready event recorded in a capture makes the comms stream join it (a fork); one recorded
        // outside while the comms stream captures becomes an external wait (CudaStream.waitFor).
        stream.waitFor(ready);
        long graph = capturedInto();
        boolean enqueuing = false;
        try {
            transport.beforeCommands(executed, stream);
            enqueuing = true;
            // Counted before the commands go to NCCL (not before the transport, which may refuse the
            // transaction and leave the communicator usable): a rank held inside this enqueue (real
            // NCCL connects to its peers in the first collectives, in ncclGroupEnd) has committed to
            // it, and a peer that closed after fewer will never join it (the watchdog's poll of the
            // host side). A captured transaction runs only in replays, each counted by launch.
            if (graph == 0) {
                this.executed++; // only this thread, holding the lock, writes it
            }
            commands.run(executed);
            transport.afterCommands(stream);
            if (signal != null) {
                stream.record(signal);
            }
        } catch (RuntimeException e) {
            buffer.clear();
            if (state == State.ABORTED && !(e instanceof CommunicatorAbortedException)) {
                // Aborted from another thread (watchdog, a failed peer of the pack, abort()) while this
                // one was inside NCCL: real NCCL then fails the call it was in (ncclGroupEnd answered
                // ncclInternalError on the H200), which says less than the abort that caused it.
                throw abortedDuring("execute of transaction #" + number, e);
            }
            if (enqueuing && !(e instanceof CommunicatorAbortedException)) {
                // Something may be half enqueued: the communicator cannot be trusted any more.
                abort("execute of transaction #" + number + " failed: " + e.getMessage());
            }
            throw e;
        }
        // The buffer keeps the commands until the next transaction opens (the recorder copies them).
        if (graph == 0) {
            recorder.add(number, executed); // the watchdog probes completion off this path
        } else {
            recorder.addCaptured(number, executed, graph);
            capturedByGraph.computeIfAbsent(graph, this::startCapturedList).addAll(executed);
        }
        return graph;
    }

    /**
     * The graph the comms stream is capturing into for this thread's {@link CudaGraph#capture}, or 0.
     * Asks CUDA only inside a capture: outside, one volatile read.
     */
    private long capturedInto() {
        long capture = Captures.currentCaptureId();
        return capture != 0 && stream.isCapturing() ? capture : 0;
    }

    /** The list of a graph's first captured transaction; drops the lists of graphs closed since. */
    private List<Command> startCapturedList(long graph) {
        capturedByGraph.keySet().removeIf(id -> id != graph && !Captures.isOpen(id));
        return new ArrayList<>();
    }

    // ---------------------------------------------------------------- graph replays

    /**
     * Launches {@code graph}, which captured transactions of this communicator
     * ({@link CudaGraph#capture} around {@link #begin} or the convenience operations), on
     * {@code stream}, tracked as one transaction: after the same pace as a transaction, the comms
     * stream waits for {@code stream}'s work so far, launches the graph and {@code stream} waits for
     * it; the flight recorder lists the replay ("replay of graph #id") with every command the graph
     * captured, and the watchdog probes its completion, so a replay that never completes is dumped
     * and aborted like a stuck transaction. On the comms stream the replay stays in order with this
     * communicator's other transactions, as NCCL needs on every rank.
     *
     * <p>Every rank must launch its own graph of the same step, as every rank executes the same
     * transactions. {@link CudaGraph#launch} also replays it, untracked and unpaced.
     *
     * @param graph  an open graph that captured transactions of this communicator
     * @param stream the stream the replay is ordered with (on this communicator's device, not capturing)
     * @throws IllegalArgumentException     when the graph captured no transaction of this communicator
     * @throws IllegalStateException        when the graph or this communicator is closed, a transaction
     *                                      is open, or the calling thread is inside a capture
     * @throws CommunicatorAbortedException when this communicator was aborted
     */
    public void launch(CudaGraph graph, CudaStream stream) {
        Objects.requireNonNull(graph, "launch: graph is null");
        checks.requireStream("launch", stream);
        refuseInsideCapture("launch");
        requireUsable("launch");
        List<Command> captured = capturedCommands(graph.id());
        if (captured == null) {
            throw new IllegalArgumentException("launch: " + graph + " captured no transaction of rank " + rank
                    + " of " + worldSize + " (device " + device + "); replay graphs without its work with"
                    + " CudaGraph.launch");
        }
        if (graph.isClosed()) {
            throw new IllegalStateException("launch: " + graph + " is closed");
        }
        Events.Transaction event = Events.transactionEnabled() ? new Events.Transaction() : null;
        if (event != null) {
            event.begin();
        }
        try {
            events.pace(hostTimeoutNanos);
        } catch (CommunicatorAbortedException e) {
            abort(e.getMessage()); // as execute does
            throw e;
        }
        long number;
        nativeLock.lock();
        try {
            requireUsable("launch");
            requireNoOpenTransaction("launch");
            number = ++sequence;
            stream.record(transactionReady);
            this.stream.waitFor(transactionReady);
            try {
                graph.launch(this.stream);
            } catch (RuntimeException e) {
                if (state == State.ABORTED) {
                    throw abortedDuring("launch of " + graph, e);
                }
                throw e;
            }
            this.executed++;
            recorder.addReplay(number, captured, graph.id());
            this.stream.record(commsDone);
            stream.waitFor(commsDone);
        } finally {
            nativeLock.unlock();
        }
        if (event != null && event.shouldCommit()) {
            event.commit(rank, number, captured, "replay of graph #" + graph.id());
        }
    }

    /**
     * The commands {@code graph} captured from this communicator, or null. The last graph launched
     * is remembered: a training loop replays the same graph step after step, and the map's lookup
     * would box its id on every replay.
     */
    private List<Command> capturedCommands(long graph) {
        Replayed last = lastReplayed;
        if (last != null && last.graph() == graph) {
            return last.commands();
        }
        List<Command> captured = capturedByGraph.get(graph);
        if (captured != null) {
            lastReplayed = new Replayed(graph, captured);
        }
        return captured;
    }

    /** A graph's id and captured commands; immutable, so a racing reader sees either the old or the new one whole. */
    private record Replayed(long graph, List<Command> commands) { }

    /**
     * Refuses to close while a graph that captured this communicator's transactions is open: its
     * NCCL nodes use this communicator's resources, and a replay after the close would use them freed.
     */
    private void refuseOpenGraphs() {
        for (Map.Entry<Long, List<Command>> captured : capturedByGraph.entrySet()) {
            if (Captures.isOpen(captured.getKey())) {
                throw new IllegalStateException("close: CUDA graph #" + captured.getKey() + " captured "
                        + captured.getValue().size() + " command(s) of rank " + rank + " of " + worldSize
                        + " and is still open: close the graph first (its NCCL nodes use this communicator)");
            }
        }
    }

    // ---------------------------------------------------------------- convenience operations

    /**
     * In-place reduce-scatter (sum) of {@code tensor}, ordered after and before work on {@code stream}.
     *
     * @param tensor the tensor, world size times the shard
     * @param stream the stream the operation is ordered with
     */
    public void reduceScatter(DeviceTensor tensor, CudaStream stream) {
        Objects.requireNonNull(tensor, "reduceScatter: tensor is null");
        checks.requireStream("reduceScatter", stream);
        runOrdered("reduceScatter", stream, tensor, ReduceOp.SUM, null, null, 0,
                (transaction, t, op, unused, unusedD, i) -> transaction.addReduceScatter(t, op));
    }

    /**
     * In-place reduce-scatter (sum) of each tensor, as one transaction ordered with {@code stream}.
     *
     * @param tensors the tensors, each world size times its shard
     * @param stream the stream the operation is ordered with
     */
    public void reduceScatter(List<DeviceTensor> tensors, CudaStream stream) {
        Objects.requireNonNull(tensors, "reduceScatter: tensors is null");
        checks.requireStream("reduceScatter", stream);
        runOrdered("reduceScatter", stream, tensors, ReduceOp.SUM, null, null, 0,
                (transaction, list, op, unused, unusedD, i) -> {
                    for (int k = 0; k < list.size(); k++) { // indexed: no iterator per call
                        transaction.addReduceScatter(list.get(k), op);
                    }
                });
    }

    /**
     * In-place all-reduce of {@code tensor} with {@code op}, ordered after and before work on {@code stream}.
     *
     * @param tensor the tensor
     * @param op the reduction
     * @param stream the stream the operation is ordered with
     */
    public void allReduce(DeviceTensor tensor, ReduceOp op, CudaStream stream) {
        Objects.requireNonNull(tensor, "allReduce: tensor is null");
        Objects.requireNonNull(op, "allReduce: op is null");
        checks.requireStream("allReduce", stream);
        runOrdered("allReduce", stream, tensor, op, null, null, 0,
                (transaction, t, o, unused, unusedD, i) -> transaction.addAllReduce(t, o));
    }

    /**
     * In-place broadcast of {@code root}'s {@code tensor} to every rank, as one transaction ordered
     * after and before work on {@code stream}. See {@link Transaction#broadcast}.
     *
     * @param tensor the tensor (the source on {@code root})
     * @param root the rank whose tensor is broadcast
     * @param stream the stream the operation is ordered with
     */
    public void broadcast(DeviceTensor tensor, int root, CudaStream stream) {
        checks.requireStream("broadcast", stream);
        checks.checkRoot("broadcast", root);
        runOrdered("broadcast", stream, tensor, null, null, null, root,
                (transaction, t, unused, unused2, unusedD, r) -> transaction.addBroadcast(t, r));
    }

    /**
     * All-to-all from {@code send} into {@code recv}, as one transaction ordered after and before
     * work on {@code stream}. See {@link Transaction#allToAll}.
     *
     * @param send this rank's slots, one per destination rank
     * @param recv where the slots from every rank land, in rank order
     * @param stream the stream the operation is ordered with
     */
    public void allToAll(DeviceTensor send, DeviceTensor recv, CudaStream stream) {
        checks.requireStream("allToAll", stream);
        runOrdered("allToAll", stream, send, recv, null, null, 0,
                (transaction, s, r, unused, unusedD, i) -> transaction.addAllToAll(s, r));
    }

    /**
     * All-reduce of {@code src} into {@code dst} with {@code op}, as one transaction ordered after
     * and before work on {@code stream}. See {@link Transaction#allReduce(DeviceTensor, DeviceTensor, ReduceOp)}.
     *
     * @param src this rank's contribution
     * @param dst the result (the same tensor: in place)
     * @param op the reduction
     * @param stream the stream the operation is ordered with
     */
    public void allReduce(DeviceTensor src, DeviceTensor dst, ReduceOp op, CudaStream stream) {
        checks.requireStream("allReduce", stream);
        runOrdered("allReduce", stream, src, dst, op, null, 0,
                (transaction, s, d, o, unusedD, i) -> transaction.addAllReduce(s, d, o));
    }

    /**
     * Reduce-scatter of {@code src} into {@code dst} with {@code op}, as one transaction ordered
     * with {@code stream}. See {@link Transaction#reduceScatter(DeviceTensor, DeviceTensor, ReduceOp)}.
     *
     * @param src this rank's contribution, world size times {@code dst}
     * @param dst this rank's reduced shard (this rank's shard of {@code src}: in place)
     * @param op the reduction
     * @param stream the stream the operation is ordered with
     */
    public void reduceScatter(DeviceTensor src, DeviceTensor dst, ReduceOp op, CudaStream stream) {
        checks.requireStream("reduceScatter", stream);
        runOrdered("reduceScatter", stream, src, dst, op, null, 0,
                (transaction, s, d, o, unusedD, i) -> transaction.addReduceScatter(s, d, o));
    }

    /**
     * Broadcast of {@code root}'s {@code src} into every rank's {@code dst}, as one transaction
     * ordered with {@code stream}. See {@link Transaction#broadcast(DeviceTensor, DeviceTensor, int)}.
     *
     * @param src the source (read on {@code root})
     * @param dst where it lands (the same tensor: in place)
     * @param root the rank whose {@code src} is broadcast
     * @param stream the stream the operation is ordered with
     */
    public void broadcast(DeviceTensor src, DeviceTensor dst, int root, CudaStream stream) {
        checks.requireStream("broadcast", stream);
        runOrdered("broadcast", stream, src, dst, null, null, root,
                (transaction, s, d, unused, unusedD, r) -> transaction.addBroadcast(s, d, r));
    }

    /**
     * Reduce of every rank's {@code src} into {@code root}'s {@code dst}, as one transaction ordered
     * with {@code stream}. See {@link Transaction#reduce}: ranks other than the root may pass a
     * null {@code dst}.
     *
     * @param src this rank's contribution
     * @param dst the result on the root; may be null elsewhere
     * @param op the reduction
     * @param root the rank that receives the result
     * @param stream the stream the operation is ordered with
     */
    public void reduce(DeviceTensor src, DeviceTensor dst, ReduceOp op, int root, CudaStream stream) {
        checks.requireStream("reduce", stream);
        runOrdered("reduce", stream, src, dst, op, null, root,
                (transaction, s, d, o, unusedD, r) -> transaction.addReduce(s, d, o, r));
    }

    /**
     * Gather of every rank's {@code src} into {@code root}'s {@code dst}, as one transaction
     * ordered with {@code stream}. See {@link Transaction#gather}: ranks other than the root may
     * pass a null {@code dst}.
     *
     * @param src this rank's contribution
     * @param dst world size times {@code src} on the root; may be null elsewhere
     * @param root the receiving rank
     * @param stream the stream the operation is ordered with
     */
    public void gather(DeviceTensor src, DeviceTensor dst, int root, CudaStream stream) {
        checks.requireStream("gather", stream);
        runOrdered("gather", stream, src, dst, null, null, root,
                (transaction, s, d, unused, unusedD, r) -> transaction.addGather(s, d, r));
    }

    /**
     * Scatter of {@code root}'s {@code src} into every rank's {@code dst}, as one transaction
     * ordered with {@code stream}. See {@link Transaction#scatter}: ranks other than the root may
     * pass a null {@code src}.
     *
     * @param src world size times {@code dst} on the root; may be null elsewhere
     * @param dst this rank's slot
     * @param root the sending rank
     * @param stream the stream the operation is ordered with
     */
    public void scatter(DeviceTensor src, DeviceTensor dst, int root, CudaStream stream) {
        checks.requireStream("scatter", stream);
        runOrdered("scatter", stream, src, dst, null, null, root,
                (transaction, s, d, unused, unusedD, r) -> transaction.addScatter(s, d, r));
    }

    /**
     * Uneven all-to-all, as one transaction ordered with {@code stream}. See
     * {@link Transaction#allToAll(DeviceTensor, long[], DeviceTensor, long[])}.
     *
     * @param send the blocks for every rank, in rank order
     * @param sendCounts elements for each rank
     * @param recv where the blocks from every rank land, in rank order
     * @param recvCounts elements from each rank
     * @param stream the stream the operation is ordered with
     */
    public void allToAll(DeviceTensor send, long[] sendCounts, DeviceTensor recv, long[] recvCounts,
                         CudaStream stream) {
        checks.requireStream("allToAll", stream);
        runOrdered("allToAll", stream, send, sendCounts, recv, recvCounts, 0,
                (transaction, s, sends, r, recvs, i) -> transaction.addAllToAll(s, sends, r, recvs));
    }

    /**
     * What a convenience operation adds to its transaction, given its arguments: each operation
     * passes a lambda that captures nothing (one object for all calls) and its arguments beside
     * it, so that a call allocates nothing.
     */
    @FunctionalInterface
    private interface Commands<A, B, C, D> {
        void add(Transaction transaction, A a, B b, C c, D d, int i);
    }

    /**
     * The convenience operations: one transaction after the work on {@code stream} so far, then
     * {@code stream} waits for it. Going through a transaction gives them what transactions have:
     * the watchdog tracks them, the flight recorder lists them, threads mode throttles them. The
     * commands go through this communicator's own handle of the open transaction, so nothing is
     * allocated.
     */
    private <A, B, C, D> void runOrdered(String operation, CudaStream stream, A a, B b, C c, D d, int i,
                                         Commands<A, B, C, D> commands) {
        long number = open(operation, transactionReady);
        try {
            // The commands are checked before anything native happens; the ready event is recorded
            // after (nobody else can use it: the transaction is open).
            commands.add(current, a, b, c, d, i);
            nativeLock.lock();
            try {
                requireUsable(operation);
                stream.record(transactionReady);
            } finally {
                nativeLock.unlock();
            }
            current.execute(null);
        } finally {
            closeTransaction(number); // discards it after a refused command; nothing once executed
        }
        waitOnComms(stream);
    }

    /**
     * In-place mean over ranks ({@link ReduceOp#AVG}).
     *
     * @param tensor the tensor
     * @param stream the stream the operation is ordered with
     */
    public void reduceMean(DeviceTensor tensor, CudaStream stream) {
        allReduce(tensor, ReduceOp.AVG, stream);
    }

    /**
     * In-place maximum over ranks.
     *
     * @param tensor the tensor
     * @param stream the stream the operation is ordered with
     */
    public void reduceMax(DeviceTensor tensor, CudaStream stream) {
        allReduce(tensor, ReduceOp.MAX, stream);
    }

    /**
     * Sums one FP32 value (a local squared norm) over ranks, in place.
     *
     * @param value one FP32 element
     * @param stream the stream the operation is ordered with
     */
    public void reduceNormSquared(DeviceTensor value, CudaStream stream) {
        Objects.requireNonNull(value, "reduceNormSquared: value is null");
        if (value.dtype() != DType.FP32 || value.count() != 1) {
            throw new IllegalArgumentException("reduceNormSquared: expected one FP32 element, got " + value.count()
                    + " x " + value.dtype());
        }
        allReduce(value, ReduceOp.SUM, stream);
    }

    /**
     * Makes {@code stream} wait for all communication enqueued on this communicator so far.
     *
     * @param stream the stream that waits
     */
    public void waitOnComms(CudaStream stream) {
        checks.requireStream("waitOnComms", stream);
        nativeLock.lock();
        try {
            requireUsable("waitOnComms");
            this.stream.record(commsDone);
            stream.waitFor(commsDone);
        } finally {
            nativeLock.unlock();
        }
    }

    /**
     * Blocks until all communication enqueued so far is done. Unlike {@link CudaStream#synchronize()}
     * it notices an abort (e.g. by the watchdog) and then throws {@link CommunicatorAbortedException}.
     *
     * @throws JncclInterruptedException when the thread is interrupted while waiting (the wait has no
     *         effect: the communication goes on, the communicator stays usable)
     */
    public void synchronize() {
        refuseInsideCapture("synchronize");
        nativeLock.lock();
        try {
            requireUsable("synchronize");
            stream.record(commsDone);
        } finally {
            nativeLock.unlock();
        }
        await(commsDone);
    }

    /**
     * Blocks until {@code event} has completed, throwing {@link CommunicatorAbortedException} if this
     * communicator is aborted meanwhile.
     *
     * @param event the event to wait for
     * @throws JncclInterruptedException when the thread is interrupted while waiting (the wait has no
     *         effect: the communication goes on, the communicator stays usable)
     */
    public void await(CudaEvent event) {
        Objects.requireNonNull(event, "await: event is null");
        refuseInsideCapture("await");
        long spins = 0;
        while (true) {
            nativeLock.lock();
            try {
                requireUsable("await");
                boolean complete = event.isComplete();
                // A failed collective can still let the event complete (or never): NCCL reports it
                // only through the asynchronous error, so look at it before saying "done" and
                // every so often while waiting.
                if (complete || (spins & 1023) == 1023) {
                    String failure = comm.asyncFailure();
                    if (failure != null) {
                        abortHoldingLock("await: " + failure);
                        requireUsable("await");
                    }
                }
                if (complete) {
                    // An abort from another thread (the pack, a peer's failure) does not wait for this
                    // lock: it may have ended the work, and released the handles the failure check
                    // reads, after the first look at the state. It marks the state first, so a second
                    // look tells work that completed from work the abort ended.
                    requireUsable("await");
                    return;
                }
            } finally {
                nativeLock.unlock();
            }
            if (Backoff.pauseOrInterrupted(spins++)) {
                requireUsable("await"); // an abort that came with the interrupt (a failing pack) says more
                throw new JncclInterruptedException("await: rank " + rank + " was interrupted while waiting for "
                        + event + "; the communication enqueued before was not cancelled",
                        new InterruptedException("await interrupted"));
            }
        }
    }

    /**
     * Refuses a wait made inside {@link CudaGraph#capture}: the captured communication runs only
     * when the graph is launched, and CUDA would invalidate the capture.
     */
    private void refuseInsideCapture(String operation) {
        Optional<CudaStream> capture = CudaGraph.currentCapture();
        if (capture.isPresent()) {
            throw new IllegalStateException(operation + ": rank " + rank + " was asked to wait inside a CUDA graph"
                    + " capture on " + capture.get() + " (CudaGraph.capture): the captured communication runs only"
                    + " when the graph is launched; wait after the capture, or after launching the graph");
        }
    }

    // ---------------------------------------------------------------- host side
    //
    // The host-side calls wait for the other ranks. With the watchdog on, a wait longer than its
    // timeout aborts the communicator (as a stuck collective would) with an exception naming the
    // ranks that did not arrive; an interrupt of the waiting thread aborts it too (the others would
    // otherwise wait for this rank forever), with the InterruptedException as the cause and the
    // thread's interrupt status kept. Either way the other ranks are released.

    /**
     * Blocks until every rank has called it.
     *
     * @throws CommunicatorAbortedException when a rank did not arrive within the watchdog's timeout,
     *         the thread was interrupted, or the communicator was aborted
     */
    public void barrier() {
        requireUsable("barrier");
        onHost(() -> {
            host.barrier(hostTimeoutNanos);
            return null;
        });
    }

    /**
     * Gathers every rank's bytes on {@code root} (rank order); other ranks get an empty list.
     *
     * @param local this rank's bytes
     * @param root the rank that receives them all
     * @return every rank's bytes on {@code root} (arrays of this rank's own), an empty list elsewhere
     * @throws CommunicatorAbortedException as {@link #barrier()}
     */
    public List<byte[]> gatherBytesHost(byte[] local, int root) {
        Objects.requireNonNull(local, "gatherBytesHost: local is null");
        checks.checkRoot("gatherBytesHost", root);
        requireUsable("gatherBytesHost");
        return onHost(() -> host.gather(local, root, hostTimeoutNanos));
    }

    /**
     * Every rank's bytes, in rank order, on every rank.
     *
     * @param local this rank's bytes
     * @return every rank's bytes, in rank order (arrays of this rank's own)
     * @throws CommunicatorAbortedException as {@link #barrier()}
     */
    public List<byte[]> allGatherBytesHost(byte[] local) {
        Objects.requireNonNull(local, "allGatherBytesHost: local is null");
        requireUsable("allGatherBytesHost");
        return onHost(() -> host.allGather(local, hostTimeoutNanos));
    }

    /**
     * A host-side wait: when it ends because a rank did not arrive, the thread was interrupted or
     * another rank failed, the launcher may not have aborted this communicator itself (MPI mode), so
     * it is aborted here: the other ranks must not wait for this one any more.
     */
    private <T> T onHost(Supplier<T> call) {
        try {
            return call.get();
        } catch (CommunicatorAbortedException e) {
            abort(e.getMessage());
            throw e;
        }
    }

    /**
     * Every rank's {@code value}, in rank order, on every rank.
     *
     * @param value this rank's value
     * @return every rank's value, in rank order
     */
    public long[] allGatherLongsHost(long value) {
        List<byte[]> all = allGatherBytesHost(ByteBuffer.allocate(Long.BYTES).putLong(value).array());
        long[] values = new long[all.size()];
        for (int i = 0; i < values.length; i++) {
            values[i] = ByteBuffer.wrap(all.get(i)).getLong();
        }
        return values;
    }

    // ---------------------------------------------------------------- sub-communicators

    /**
     * Splits this communicator ({@code ncclCommSplit}): the ranks that pass the same non-negative
     * {@code color} get a new communicator among themselves, ranked by {@code key} (ties by their
     * rank here), on the same devices and with the same options. A rank that passes a negative
     * color takes part but gets no communicator: the result is {@link Optional#empty()}.
     *
     * <p><b>Collective:</b> every rank of this communicator must call it (the host all-gather of
     * this communicator exchanges the colors and keys, then NCCL splits), with no transaction open;
     * the wait for the others is bounded by {@link CommunicatorOptions#initTimeout()}, and a failure
     * or timeout of the split aborts this communicator. The new communicator's transactions,
     * convenience operations, barrier and host gathers involve its members only; in threads mode a
     * failure of any of its ranks fails the whole pack, as a failure of this one does.
     *
     * <p><b>Lifecycle:</b> close the new communicator when done with it; closing (or aborting) this
     * one first closes (or aborts) every communicator split from it that is still open.
     *
     * @param color the group of this rank; negative: not a member of any
     * @param key the order of this rank in its group
     * @return the new communicator, or empty for a negative color
     * @throws IllegalStateException         when a transaction is open or this communicator is closed
     * @throws UnsupportedOperationException when the launcher has no sub-communicators
     * @throws NcclException                 when NCCL refuses the split
     * @throws CommunicatorAbortedException  when the other ranks did not split in time, or on abort
     */
    public Optional<Communicator> split(int color, int key) {
        requireUsable("split");
        nativeLock.lock();
        try {
            requireNoOpenTransaction("split");
        } finally {
            nativeLock.unlock();
        }
        List<Integer> members = Children.members(onHost(() -> host.allGather(Children.colorAndKey(color, key),
                Deadlines.toNanos(options.initTimeout()))), color);
        int childRank = members.indexOf(rank);
        events.beforeSplit(color, key);
        ReentrantLock childLock = new ReentrantLock();
        NcclComm childComm;
        nativeLock.lock();
        try {
            requireUsable("split");
            childComm = comm.split(color, key, childRank, members.size(), options.initTimeout(), failures::cancellation,
                    childLock);
        } catch (RuntimeException e) {
            if (state == State.ABORTED && !(e instanceof IllegalArgumentException)) {
                // Aborted by another thread (a failed peer of the pack, the watchdog) while NCCL split:
                // say why, as every other call after an abort does.
                throw abortedDuring("split (color " + color + ", key " + key + ")", e);
            }
            abortHoldingLock("split (color " + color + ", key " + key + ") failed: " + e.getMessage());
            throw e;
        } finally {
            nativeLock.unlock();
        }
        if (childComm == null) {
            return Optional.empty();
        }
        Communicator child;
        try {
            Membership membership = new Membership(this, color, key, childRank, members);
            RankParts parts = Objects.requireNonNull(host.split(membership), "split: the launcher made no parts");
            child = new Communicator(membership, childComm, parts);
        } catch (RuntimeException | Error e) {
            childComm.abort();
            throw e;
        }
        attach(child);
        synchronized (lifecycle) {
            if (state == State.OPEN) {
                children.add(child);
                return Optional.of(child);
            }
        }
        child.close();
        requireUsable("split");
        throw new IllegalStateException("split: communicator of rank " + rank + " was closed during the split");
    }

    /**
     * The communicator this one was split from, if any.
     *
     * @return the parent, or empty for a communicator that was not made by {@link #split}
     */
    public Optional<Communicator> parent() {
        return Optional.ofNullable(parent);
    }

    // ---------------------------------------------------------------- abort and close

    /**
     * Aborts the communicator (ncclCommAbort): pending and stuck operations end, every later use
     * and every thread waiting through this communicator gets {@link CommunicatorAbortedException}
     * with {@code reason}. Idempotent; callable from any thread. Communicators
     * {@linkplain #split split} from this one that are still open are aborted too.
     *
     * @param reason why; reported by every exception that follows
     */
    public void abort(String reason) {
        Objects.requireNonNull(reason, "abort: reason is null");
        String explained = failures.explainAbort(reason);
        synchronized (lifecycle) {
            if (state != State.OPEN) {
                return;
            }
            abortReason = explained;
            state = State.ABORTED;
        }
        for (Communicator child : children.live()) {
            child.abort("the communicator it was split from (rank " + rank + ") was aborted: " + explained);
        }
        LOG.error("rank {} (device {}): aborting communicator: {}\n  flight recorder, {}", rank, device, explained,
                recorder.dump());
        Events.Abort event = new Events.Abort();
        if (event.shouldCommit()) {
            event.rank = rank;
            event.reason = explained;
            event.commit();
        }
        // First release threads the host side keeps waiting (barriers): one of them may hold the lock.
        try {
            failures.aborting(explained);
        } catch (RuntimeException e) {
            LOG.warn("rank {}: the host side failed while aborting", rank, e);
        }
        comm.abort();
        try {
            failures.aborted(explained);
        } catch (RuntimeException e) {
            LOG.warn("rank {}: the host side failed after the abort", rank, e);
        }
    }

    /**
     * Waits for pending communication, finalizes and destroys the communicator, within
     * {@link CommunicatorOptions#closeTimeout()}; past the deadline it aborts instead. Idempotent.
     * Communicators {@linkplain #split split} from this one that are still open are closed first.
     *
     * @throws IllegalStateException (nothing closed) while a {@link CudaGraph} that captured
     *         transactions of this communicator is open, or when called inside a capture
     */
    @Override
    public void close() {
        synchronized (lifecycle) {
            if (state == State.CLOSED) {
                return;
            }
        }
        refuseInsideCapture("close"); // the close waits for the comms stream: CUDA forbids it in a capture
        refuseOpenGraphs();
        for (Communicator child : children.live()) {
            child.close(); // bounded and idempotent like this one
        }
        try {
            closeSelf();
        } finally {
            if (parent != null) {
                parent.children.remove(this);
            }
        }
    }

    private void closeSelf() {
        long deadline = Deadlines.deadline(options.closeTimeout());
        if (watchdog != null) {
            watchdog.stop();
        }
        // A thread held inside NCCL (blocking mode, a peer gone) is ended by an abort.
        if (!comm.lockForClose(options.closeTimeout(), () -> abort("close: another thread of rank " + rank
                + " was still inside a call of this communicator after " + Deadlines.toMillis(options.closeTimeout())
                + " ms (CommunicatorOptions.closeTimeout)"))) {
            synchronized (lifecycle) {
                state = State.CLOSED;
            }
            return;
        }
        try {
            if (state == State.OPEN) {
                // The launcher first learns whether the other ranks are closing too (MPI mode ends a
                // job whose ranks wait for one that closed early instead of hanging).
                String failure = events.closing(executed, Deadlines.remainingNanos(deadline));
                if (failure == null) {
                    failure = comm.finalizeAndDestroy(stream, deadline, options.closeTimeout());
                }
                if (failure != null) {
                    LOG.warn("rank {}: {}; aborting instead", rank, failure);
                    abort(failure);
                }
            }
            synchronized (lifecycle) {
                state = State.CLOSED;
            }
            comm.closeArena();
            // Deregistered by the finalize above, or gone with an abort: the memory may be freed now.
            for (Registration registration : List.copyOf(registrations)) {
                registration.dropped();
            }
            registrations.clear();
            recorder.closeEvents();
            try {
                transport.close();
            } catch (RuntimeException e) {
                LOG.warn("rank {}: closing the transport failed", rank, e);
            }
            try {
                events.closed(abortReason != null);
            } catch (RuntimeException e) {
                LOG.warn("rank {}: closing the host side failed", rank, e);
            }
            List<AutoCloseable> resources = List.of(commsDone, transactionReady, stream);
            Resources.closeAll(resources, null, LOG);
        } finally {
            nativeLock.unlock();
        }
    }

    /** {@link #abort} from a thread that holds the native lock: released for the abort, then taken again. */
    private void abortHoldingLock(String reason) {
        nativeLock.unlock();
        try {
            abort(reason);
        } finally {
            nativeLock.lock();
        }
    }

    // ---------------------------------------------------------------- checks

    final void requireUsable(String operation) {
        if (state != State.OPEN) {
            // Out of line: the hot callers' compiled code stays small enough for C2 to inline them
            // (and to scalar-replace the transaction handle that begin returns).
            throw unusable(operation);
        }
    }

    private RuntimeException unusable(String operation) {
        State current = state;
        if (current == State.ABORTED) {
            failures.beforeAbortedException(abortReason);
            return new CommunicatorAbortedException(operation + ": communicator of rank " + rank + " was aborted: "
                    + abortReason);
        }
        return new IllegalStateException(operation + ": communicator of rank " + rank + " is closed");
    }

    /** The exception for a native call that failed because the communicator was aborted meanwhile. */
    private CommunicatorAbortedException abortedDuring(String operation, RuntimeException failure) {
        failures.beforeAbortedException(abortReason);
        Throwable cause = failure;
        if (Thread.currentThread().isInterrupted()) {
            // The watchdog aborted because this thread was interrupted inside NCCL: as for the host
            // side's waits, the interrupt is the cause (the status stays set), NCCL's failure beside it.
            InterruptedException interrupted = new InterruptedException(operation + " interrupted inside NCCL");
            interrupted.addSuppressed(failure);
            cause = interrupted;
        }
        return new CommunicatorAbortedException(operation + ": communicator of rank " + rank
                + " was aborted while the call was in NCCL: " + abortReason, cause);
    }

    // ---------------------------------------------------------------- registration

    /**
     * Registers {@code memory} with this communicator (ncclCommRegister), so that NCCL may move data
     * from and to it without staging copies; most useful with memory from
     * {@link DeviceMemory#allocateForNccl}. Commands on its tensors work as on any other memory.
     * Close the returned registration (ncclCommDeregister) once the work using it has completed;
     * closing this communicator deregisters what is still registered. While registered, the
     * memory's {@link DeviceMemory#close()} is refused.
     *
     * @param memory open device memory on this communicator's device, not empty
     * @return the registration, to be closed by the caller
     * @throws IllegalArgumentException     when the memory is on another device or empty
     * @throws IllegalStateException        when the memory or this communicator is closed
     * @throws CommunicatorAbortedException when this communicator was aborted
     * @throws NcclException                when NCCL refuses
     */
    public Registration register(DeviceMemory memory) {
        Objects.requireNonNull(memory, "register: memory is null");
        requireUsable("register");
        if (memory.device() != device) {
            throw new IllegalArgumentException("register: " + memory + " is on device " + memory.device()
                    + ", the communicator of rank " + rank + " on device " + device);
        }
        if (memory.bytes() == 0) {
            throw new IllegalArgumentException("register: " + memory + " is empty: expected at least 1 byte");
        }
        String holder = "the communicator of rank " + rank + " of " + worldSize + " (device " + device + ")";
        nativeLock.lock();
        try {
            requireUsable("register");
            if (!Pins.pin(memory, holder, memory::isClosed)) {
                throw new IllegalStateException("register: " + memory + " is closed");
            }
            long handle;
            try {
                handle = comm.register(memory.address(), memory.bytes());
            } catch (RuntimeException e) {
                Pins.unpin(memory, holder);
                throw e;
            }
            Registration registration = new Registration(memory, handle, holder, this::deregister);
            registrations.add(registration);
            return registration;
        } finally {
            nativeLock.unlock();
        }
    }

    /** A registration's close: ncclCommDeregister while this communicator is open, nothing after. */
    private void deregister(Registration registration) {
        nativeLock.lock();
        try {
            if (registrations.remove(registration) && state == State.OPEN) {
                comm.deregister(registration.handle());
            }
        } finally {
            nativeLock.unlock();
        }
    }

    /** {@return the NCCL side of this communicator (tests ask the emulation about its handle)} */
    NcclComm ncclComm() {
        return comm;
    }

    /** {@return how this communicator enqueues commands (tests force NCCL's older paths through it)} */
    CommandRunner commandRunner() {
        return commands;
    }

    /** {@return the argument checks of this rank, shared with its transactions} */
    final Checks checks() {
        return checks;
    }

    @Override
    public String toString() {
        return "Communicator[rank " + rank + " of " + worldSize + ", device " + device + ", " + state
                + "]";
    }
}
