package dev.jnccl;

import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.internal.Deadlines;
import dev.jnccl.internal.Resources;
import dev.jnccl.spi.Command;
import dev.jnccl.spi.Command.Kind;
import dev.jnccl.spi.Diagnoses;
import dev.jnccl.spi.Failures;
import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.Membership;
import dev.jnccl.spi.Modes;
import dev.jnccl.spi.NcclHostSide;
import dev.jnccl.spi.RankEvents;
import dev.jnccl.spi.RankParts;
import dev.jnccl.spi.Transport;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
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

    static {
        Modes.install(Communicator::create);
        Modes.installJoin(Communicator::join);
        Diagnoses.install(communicator -> communicator.forensics.summary(),
                (communicator, trigger) -> communicator.forensics.diagnose(trigger));
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
    /**
     * Recorded after a graph replay on its stream, waited for by the comms stream later: an event of
     * its own, which nothing else records meanwhile (a capture would record {@code commsDone}).
     */
    private final CudaEvent replayDone;
    private final FlightRecorder recorder;
    /** Open, revoked, aborted or closed, with the abort's reason. */
    private final CommState state = new CommState();
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
    private final Checks checks;
    private final CommandRunner commands;
    /** The memory registered with this communicator. */
    private final Registrations registrations;
    /** What the transactions captured into CUDA graphs hold, for replays and close. */
    private final GraphReplays replays = new GraphReplays();
    /** The stages of a transaction and a replay. */
    private final ExecutePipeline pipeline;
    /** The waits on this communicator's communication. */
    private final Waits waits;
    /** What the calling thread does, this rank's summary and the diagnosis of an abort. */
    private final Forensics forensics;
    /** The shrink to the survivors and the communicator it made. */
    private final Shrinks shrinks;
    /** The grow of this communicator (its ticket) and the communicator it made. */
    private final Grows grows;
    /** What the launcher says of lost ranks: {@link RankLostException} instead of a plain abort. */
    private final LostRanks losses;

    /** Split, abort, retire and close. */
    private final Lifecycle lifecycle;
    /** The transactions: numbers, the open one, outcomes, how many were executed. */
    private final TransactionLog log;

    /** A rank of a new communicator: see {@link Modes#communicator}. */
    private Communicator(UniqueId id, int rank, int worldSize, int device, CommunicatorOptions options,
                         RankParts parts) {
        this(rank, worldSize, device, Objects.requireNonNull(options, "Communicator: options are null"),
                Objects.requireNonNull(parts, "Communicator: parts are null"), null, new ReentrantLock(),
                lock -> NcclComm.init(Objects.requireNonNull(id, "Communicator: unique id is null"), rank, worldSize,
                        device, options, options.initTimeout(), parts.failures()::cancellation, lock));
    }

    /** A member of a split: takes over the split's NCCL communicator (on failure the caller aborts it). */
    static Communicator member(Membership membership, NcclComm childComm, RankParts parts) {
        return new Communicator(membership, childComm, parts);
    }

    private Communicator(Membership membership, NcclComm childComm, RankParts parts) {
        this(membership.rank(), membership.worldSize(), membership.parent().device(), membership.parent().options(),
                parts, membership.parent(), childComm.lock(), lock -> childComm);
    }

    private Communicator(int rank, int worldSize, int device, CommunicatorOptions options, RankParts parts,
                         Communicator parent, ReentrantLock lock, Function<ReentrantLock, NcclComm> connect) {
        this.checks = new Checks(rank, worldSize, device);
        this.log = new TransactionLog(rank, this);
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
        // Before anything native: a bad jnccl.debug setting is refused here.
        ConsistencyCheck consistency = ConsistencyCheck.of(this, options, host, rank, worldSize, hostTimeoutNanos);
        this.parent = parent;
        this.nativeLock = lock;
        this.recorder = new FlightRecorder(options.flightRecorderSize());
        this.forensics = new Forensics(this, log, recorder, failures, options, parent != null);
        Events.CommInit initEvent = Events.CommInit.begun();
        long started = System.nanoTime();
        Connected connected = Connected.make(device, nativeLock, connect, transport);
        this.stream = connected.stream();
        this.transactionReady = connected.transactionReady();
        this.commsDone = connected.commsDone();
        this.replayDone = connected.replayDone();
        this.comm = connected.comm();
        this.commands = new CommandRunner(comm, stream, libraries, transport, rank, worldSize);
        this.losses = new LostRanks(this, failures, rank, worldSize);
        this.shrinks = new Shrinks(this, rank, worldSize, nativeLock, comm, stream, libraries);
        this.grows = new Grows(this, rank, worldSize, nativeLock, comm, libraries);
        this.registrations = new Registrations(this, nativeLock, comm);
        this.waits = new Waits(this, nativeLock, comm, stream, recorder, forensics, commsDone);
        this.pipeline = new ExecutePipeline(this, log, events, hostTimeoutNanos, nativeLock, stream, transport, commands,
                recorder, replays, transactionReady, replayDone, consistency);
        this.lifecycle = new Lifecycle(this, state, parts, comm, nativeLock, forensics, recorder, log, registrations,
                losses, this::watchdog, List.of(replayDone, commsDone, transactionReady, stream));
        reportReady(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started), initEvent);
        this.watchdog = options.watchdogEnabled() ? startWatchdog() : null;
    }

    /** The comms stream, the transaction's two events, the replays' event and NCCL's communicator, made in this order. */
    private record Connected(CudaStream stream, CudaEvent transactionReady, CudaEvent commsDone, CudaEvent replayDone,
                             NcclComm comm) {
        /** Made on {@code device}; a failure closes what was made and the launcher's transport (made for it). */
        static Connected make(int device, ReentrantLock lock, Function<ReentrantLock, NcclComm> connect,
                              Transport transport) {
            Cuda.setDevice(device);
            List<AutoCloseable> created = new ArrayList<>();
            try {
                CudaStream stream = Resources.remember(created, CudaStream.create());
                CudaEvent ready = Resources.remember(created, CudaEvent.create());
                CudaEvent done = Resources.remember(created, CudaEvent.create());
                CudaEvent replayed = Resources.remember(created, CudaEvent.create());
                return new Connected(stream, ready, done, replayed, connect.apply(lock));
            } catch (RuntimeException e) {
                created.add(transport::close);
                Resources.closeAll(created, e, LOG);
                throw e;
            }
        }
    }

    /** The monitor thread: NCCL's asynchronous errors, transactions not complete in time, the launcher's poll. */
    private Watchdog startWatchdog() {
        return new Watchdog(rank, comm, stream, recorder, options.watchdogTimeout(), options.watchdogInterval(),
                state::isOpen, lifecycle::abortDiagnosed,
                pendingNanos -> {
                    forensics.poll(pendingNanos);
                    return failures.poll(log.executed(), pendingNanos);
                });
    }

    /** {@return the watchdog, null when it is off or not started yet (the lifecycle stops it at close)} */
    private Watchdog watchdog() {
        return watchdog;
    }

    /** The init line (NCCL version, rank, device, backend) and the JFR {@code jnccl.CommInit} event. */
    private void reportReady(long initMillis, Events.CommInit initEvent) {
        LOG.info("jnccl communicator ready: rank {} of {}{}, device {}, backend {}, mode {}, NCCL {}, CUDA runtime {}"
                        + " (driver {}), init {} ms", rank, worldSize, parent == null ? "" : " (split of rank "
                        + parent.rank + " of " + parent.worldSize + ")", device, libraries.backend().id(), options.mode(),
                LibraryVersion.of(libraries.ncclVersion()), LibraryVersion.of(libraries.cudaRuntimeVersion()),
                LibraryVersion.of(libraries.cudaDriverVersion()), initMillis);
        initEvent.commit(rank, worldSize, device, libraries.backend().id(),
                LibraryVersion.of(libraries.ncclVersion()).toString());
    }

    /** The constructor behind {@link Modes#communicator}: this rank's communicator, handed to its host side. */
    private static Communicator create(UniqueId id, int rank, int worldSize, int device, CommunicatorOptions options,
                                       RankParts parts) {
        Objects.requireNonNull(parts, "Communicator: parts are null");
        return attach(new Communicator(id, rank, worldSize, device, options, parts));
    }

    static Communicator attach(Communicator communicator) {
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
     * The survivors' communicator of a {@link #shrink}, rank {@code survivors.rank()} of
     * {@code survivors.worldSize()}, on the same device with the same options, its NCCL communicator
     * made by {@code connect} (NCCL's shrink, or a re-init) under {@code lock}, attached to its launcher.
     */
    static Communicator successor(Membership survivors, RankParts parts, ReentrantLock lock,
                                  Function<ReentrantLock, NcclComm> connect) {
        Communicator old = survivors.parent();
        return made(survivors.rank(), survivors.worldSize(), old.device, old.options, parts, lock, connect);
    }

    /**
     * The grown communicator of a {@link #grow}: rank {@code old.rank()} of {@code worldSize}, on the
     * same device with the same options, its NCCL communicator made by {@code connect} under
     * {@code lock}, attached to its launcher.
     */
    static Communicator grown(Communicator old, int worldSize, RankParts parts, ReentrantLock lock,
                              Function<ReentrantLock, NcclComm> connect) {
        return made(old.rank, worldSize, old.device, old.options, parts, lock, connect);
    }

    /** A new rank of a grow (see {@link #joinGrow}) with a launcher's parts: behind {@link Modes#joinGrow}. */
    private static Communicator join(GrowTicket ticket, int rank, int device, CommunicatorOptions options,
                                     RankParts parts) {
        Grows.checkJoin(ticket, rank, options);
        Objects.requireNonNull(parts, "joinGrow: parts are null");
        Events.Grow event = new Events.Grow();
        event.begin();
        Communicator joined = made(rank, ticket.toWorld(), device, options, parts, new ReentrantLock(),
                lock -> Grows.join(ticket, rank, device, options, parts.failures()::cancellation, lock));
        Grows.record(event, rank, ticket.fromWorld(), ticket);
        return joined;
    }

    /** A communicator made of {@code parts}, attached; the launcher's side ends when the constructor fails. */
    private static Communicator made(int rank, int worldSize, int device, CommunicatorOptions options, RankParts parts,
                                     ReentrantLock lock, Function<ReentrantLock, NcclComm> connect) {
        Communicator made;
        try {
            made = new Communicator(rank, worldSize, device, options, parts, null, lock, connect);
        } catch (RuntimeException | Error e) {
            try {
                parts.events().closed(true); // the constructor closed the transport; the launcher's side ends too
            } catch (RuntimeException closing) {
                e.addSuppressed(closing);
            }
            throw e;
        }
        return attach(made);
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
     * watchdog (or host-side timeout) fires. For the same reason the consistency checks
     * ({@link CommunicatorOptions#withConsistencyChecks}, {@code jnccl.debug=detail}), which compare
     * the ranks' commands over a host channel before each transaction, are skipped here, with a
     * WARN line at creation.
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

    /**
     * {@return the comms stream: the transactions of this communicator run on it, in order} (a graph
     * replay runs on the stream given to {@link #launch}, ordered with it)
     */
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
        return state.get() == CommState.State.ABORTED;
    }

    /**
     * Whether {@link #close()} has run.
     *
     * @return whether it is closed
     */
    public boolean isClosed() {
        return state.get() == CommState.State.CLOSED;
    }

    /** {@return why the communicator was aborted, or null} */
    public String abortReason() {
        return state.reason();
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
        return new Transaction(this, log, checks, log.open("begin", ready));
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
        long number = log.open("begin", transactionReady);
        try {
            nativeLock.lock();
            try {
                requireUsable("begin");
                waitFor.record(transactionReady);
            } finally {
                nativeLock.unlock();
            }
        } catch (RuntimeException | Error e) {
            log.discard(number);
            throw e;
        }
        return new Transaction(this, log, checks, number);
    }

    /**
     * Executes the open transaction (its handle checked it): see {@link Transaction#execute}.
     *
     * <p>Through a method handle that is no compile-time constant, so that C2 never inlines the
     * pipeline (whose downcalls are force-inlined) into {@code Transaction.execute}: compiled on its
     * own, that method would then be too big for C2 to inline into users' code, and the transaction
     * handle of a {@code begin(..)...execute(..)} chain would no longer be scalar-replaced (seen in
     * {@code HotPathAllocationTest}). The call costs a few nanoseconds more than a direct one.
     */
    void execute(CudaEvent signal) {
        try {
            executeEntry.invokeExact(pipeline, signal);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable e) {
            throw new IllegalStateException("execute: " + e, e); // the pipeline throws no checked exception
        }
    }

    /** {@link ExecutePipeline#execute}, as a method handle: see {@link #execute}. */
    private final MethodHandle executeEntry = EXECUTE;
    private static final MethodHandle EXECUTE;

    static {
        try {
            EXECUTE = MethodHandles.lookup().findVirtual(ExecutePipeline.class, "execute",
                    MethodType.methodType(void.class, CudaEvent.class));
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    // ---------------------------------------------------------------- graph replays

    /**
     * Launches {@code graph}, which captured transactions of this communicator
     * ({@link CudaGraph#capture} around {@link #begin} or the convenience operations), on
     * {@code stream}, tracked as one transaction: after the same pace as a transaction, the graph is
     * launched on {@code stream} (as {@link CudaGraph#launch}), after {@code stream}'s work so far and
     * after every transaction and replay of this communicator enqueued before, and before every one
     * enqueued later (the comms stream waits for it before its next work, {@link #synchronize} and
     * {@link #waitOnComms} too): the replay stays in order with this communicator's other work, as
     * NCCL needs on every rank. When the previous replay ran on the same {@code stream} object and
     * nothing was executed on this communicator since (a training loop replaying its step),
     * {@code stream} already stands after the comms stream, and the replay costs one launch and one
     * event record. The flight recorder lists the
     * replay ("replay of graph #id") with every command the graph captured, and the watchdog probes
     * its completion, so a replay that never completes is dumped and aborted like a stuck
     * transaction. Work you enqueue yourself on {@link #stream()} is not work of this communicator:
     * make {@code stream} wait for it (e.g. {@link #waitOnComms}) before the launch if the replay
     * needs it.
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
        waits.refuseInsideCapture("launch");
        requireUsable("launch");
        List<Command> captured = replays.captured(graph.id());
        if (captured == null) {
            throw new IllegalArgumentException("launch: " + graph + " captured no transaction of rank " + rank
                    + " of " + worldSize + " (device " + device + "); replay graphs without its work with"
                    + " CudaGraph.launch");
        }
        if (graph.isClosed()) {
            throw new IllegalStateException("launch: " + graph + " is closed");
        }
        int before = forensics.enter(Forensics.LAUNCH);
        try {
            pipeline.replay(graph, stream, captured);
        } finally {
            forensics.exit(before);
        }
    }

    /** Makes the comms stream wait for the graph replays launched on other streams; the caller holds the native lock. */
    void joinReplays() {
        recorder.joinReplays(stream);
    }

    /** {@return what the graphs captured and where the last replay ran} (a test reads its count of comms-stream waits) */
    GraphReplays graphReplays() {
        return replays;
    }

    // ---------------------------------------------------------------- convenience operations

    /**
     * In-place reduce-scatter (sum) of {@code tensor}, ordered after and before work on {@code stream}.
     *
     * @param tensor the tensor, world size times the shard
     * @param stream the stream the operation is ordered with
     */
    public void reduceScatter(DeviceTensor tensor, CudaStream stream) {
        ordered(Kind.REDUCE_SCATTER, true, tensor, tensor, ReduceOp.SUM, 0, stream);
    }

    /**
     * In-place reduce-scatter (sum) of each tensor, as one transaction ordered with {@code stream}.
     *
     * @param tensors the tensors, each world size times its shard
     * @param stream the stream the operation is ordered with
     */
    public void reduceScatter(List<DeviceTensor> tensors, CudaStream stream) {
        Objects.requireNonNull(tensors, "reduceScatter: tensors is null");
        long number = openOrdered("reduceScatter", stream);
        try {
            for (int k = 0; k < tensors.size(); k++) { // indexed: no iterator per call
                DeviceTensor tensor = tensors.get(k);
                Transaction.add(log, checks, Transaction.CURRENT, Kind.REDUCE_SCATTER, true, tensor, tensor, ReduceOp.SUM, 0);
            }
        } catch (RuntimeException | Error e) {
            log.discard(number);
            throw e;
        }
        executeOrdered(number, stream);
    }

    /**
     * In-place all-reduce of {@code tensor} with {@code op}, ordered after and before work on {@code stream}.
     *
     * @param tensor the tensor
     * @param op the reduction
     * @param stream the stream the operation is ordered with
     */
    public void allReduce(DeviceTensor tensor, ReduceOp op, CudaStream stream) {
        ordered(Kind.ALL_REDUCE, true, tensor, tensor, op, 0, stream);
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
        ordered(Kind.BROADCAST, true, tensor, tensor, null, root, stream);
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
        ordered(Kind.ALL_TO_ALL, false, send, recv, null, 0, stream);
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
        ordered(Kind.ALL_REDUCE, false, src, dst, op, 0, stream);
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
        ordered(Kind.REDUCE_SCATTER, false, src, dst, op, 0, stream);
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
        ordered(Kind.BROADCAST, false, src, dst, null, root, stream);
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
        ordered(Kind.REDUCE, false, src, dst, op, root, stream);
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
        ordered(Kind.GATHER, false, src, dst, null, root, stream);
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
        ordered(Kind.SCATTER, false, src, dst, null, root, stream);
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
        orderedCounted(Kind.UNEVEN_ALL_TO_ALL, send, sendCounts, recv, recvCounts, stream);
    }

    /**
     * All-gather of every rank's {@code shard} into every rank's {@code full}, as one transaction
     * ordered after and before work on {@code stream}. See {@link Transaction#allGather(DeviceTensor, DeviceTensor)}.
     *
     * @param shard this rank's shard
     * @param full the gathered tensor (world size times the shard)
     * @param stream the stream the operation is ordered with
     */
    public void allGather(DeviceTensor shard, DeviceTensor full, CudaStream stream) {
        ordered(Kind.ALL_GATHER, false, shard, full, null, 0, stream);
    }

    /**
     * Uneven all-gather, as one transaction ordered with {@code stream}. See
     * {@link Transaction#allGather(DeviceTensor, DeviceTensor, long[])}.
     *
     * @param shard this rank's block: {@code counts[rank]} elements
     * @param full where every rank's block lands, in rank order
     * @param counts elements of each rank
     * @param stream the stream the operation is ordered with
     */
    public void allGather(DeviceTensor shard, DeviceTensor full, long[] counts, CudaStream stream) {
        orderedCounted(Kind.ALL_GATHER_V, shard, null, full, counts, stream);
    }

    /**
     * The convenience operations of one command: one transaction after the work on {@code stream}
     * so far, then {@code stream} waits for it. Going through a transaction gives them what
     * transactions have: the watchdog tracks them, the flight recorder lists them, threads mode
     * throttles them; nothing is allocated.
     */
    private void ordered(Kind kind, boolean single, DeviceTensor src, DeviceTensor dst, ReduceOp op, int target,
                         CudaStream stream) {
        if (kind.role() == Command.Role.ROOT) {
            checks.checkRoot(kind.method(), target); // an argument's error comes before the state's
        }
        long number = openOrdered(kind.method(), stream);
        try {
            Transaction.add(log, checks, Transaction.CURRENT, kind, single, src, dst, op, target);
        } catch (RuntimeException | Error e) {
            log.discard(number);
            throw e;
        }
        executeOrdered(number, stream);
    }

    /** {@link #ordered} for a counted kind. */
    private void orderedCounted(Kind kind, DeviceTensor src, long[] sendCounts, DeviceTensor dst, long[] recvCounts,
                                CudaStream stream) {
        long number = openOrdered(kind.method(), stream);
        try {
            Transaction.addCounted(log, checks, Transaction.CURRENT, kind, src, sendCounts, dst, recvCounts);
        } catch (RuntimeException | Error e) {
            log.discard(number);
            throw e;
        }
        executeOrdered(number, stream);
    }

    /** Opens a convenience operation's transaction, its ready event to be recorded on {@code stream}. */
    private long openOrdered(String operation, CudaStream stream) {
        checks.requireStream(operation, stream);
        return log.open(operation, transactionReady);
    }

    /**
     * Executes a convenience operation's checked commands after the work on {@code stream} so far
     * (the ready event is recorded only now, inside the pipeline's lock hold: nobody else can use it
     * while the transaction is open), then makes {@code stream} wait for them (in the same lock hold).
     */
    private void executeOrdered(long number, CudaStream stream) {
        try {
            // A direct call: no transaction handle lives here for the pipeline's inlining to cost (see #execute).
            pipeline.execute(null, stream);
        } finally {
            log.discard(number); // after a failure before the execute; nothing once executed
        }
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
        waits.waitOnComms(stream);
    }

    /**
     * Blocks until all communication enqueued so far is done. Unlike {@link CudaStream#synchronize()}
     * it notices an abort (e.g. by the watchdog) and then throws {@link CommunicatorAbortedException}.
     *
     * @throws JncclInterruptedException when the thread is interrupted while waiting (the wait has no
     *         effect: the communication goes on, the communicator stays usable)
     */
    public void synchronize() {
        waits.synchronize();
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
        waits.await(event);
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
        onHost(Forensics.BARRIER, () -> {
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
        return onHost(Forensics.GATHER, () -> host.gather(local, root, hostTimeoutNanos));
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
        return onHost(Forensics.ALL_GATHER, () -> host.allGather(local, hostTimeoutNanos));
    }

    /**
     * A host-side wait: when it ends because a rank did not arrive, the thread was interrupted or
     * another rank failed, the launcher may not have aborted this communicator itself (MPI mode), so
     * it is aborted here: the other ranks must not wait for this one any more.
     */
    <T> T onHost(int what, Supplier<T> call) {
        int before = forensics.enter(what);
        try {
            return call.get();
        } catch (CommunicatorAbortedException e) {
            lifecycle.abort(e.getMessage(), e.diagnosis().orElse(null));
            throw losses.or(e);
        } finally {
            forensics.exit(before);
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
        return lifecycle.split(color, key);
    }

    /**
     * The communicator this one was split from, if any.
     *
     * @return the parent, or empty for a communicator that was not made by {@link #split}
     */
    public Optional<Communicator> parent() {
        return Optional.ofNullable(parent);
    }

    // ---------------------------------------------------------------- lost ranks

    /**
     * Revokes this communicator ({@code ncclCommRevoke}, NCCL 2.28.7+): NCCL ends the work in flight
     * and refuses new work, so that a {@link #shrink} (or the close) does not wait behind a
     * collective stuck on a lost rank. Afterwards transactions, convenience operations and host-side
     * calls throw {@link CommunicatorAbortedException} ("revoked"); {@link #shrink}, {@link #abort}
     * and {@link #close} work. Local: the other ranks need not call it. Idempotent.
     *
     * @throws UnsupportedOperationException when the loaded NCCL has no ncclCommRevoke (the message
     *         names the version it needs and the one loaded)
     * @throws IllegalStateException         when a transaction is open or this communicator is closed
     * @throws CommunicatorAbortedException  when this communicator was aborted
     * @throws NcclException                 when NCCL refuses
     */
    public void revoke() {
        Shrinks.requireFeature("revoke", NcclFeature.REVOKE, libraries);
        nativeLock.lock();
        try {
            if (state.get() == CommState.State.REVOKED) {
                return;
            }
            requireUsable("revoke");
            log.requireNoneOpen("revoke");
            comm.revoke(Deadlines.deadline(options.closeTimeout()), options.closeTimeout());
            state.revoke("revoked (Communicator.revoke)");
        } finally {
            nativeLock.unlock();
        }
        LOG.info("rank {} of {}: communicator revoked", rank, worldSize);
    }

    /**
     * The survivors' communicator without {@code excludedRanks}: collective over the survivors only
     * (every rank not excluded calls it; the excluded ranks need not, they may be dead), ranks
     * renumbered in the order of their ranks here (as NCCL's {@code ncclCommShrink}), on the same
     * device with the same options; its host side (barrier, gathers, splits) meets among the
     * survivors. Works on an aborted or {@linkplain #revoke revoked} communicator too: the usual case
     * after a rank was lost (see {@link RankLostException#recover()}).
     *
     * <p>Made by NCCL's shrink (NCCL 2.27+) while this communicator is healthy (not aborted, no
     * asynchronous error, nothing pending on its comms stream), else by a re-init: the survivors'
     * rank 0 makes a fresh unique id, their host side hands it over, each inits a new communicator.
     * Which path ran is logged (INFO) and recorded in the JFR event {@code jnccl.Shrink}; the system
     * property {@code jnccl.shrink.path} ({@code auto}, {@code nccl}, {@code reinit}) overrides it.
     *
     * <p>This communicator is aborted afterwards (reason "shrunk to N ranks without ranks [..]"),
     * also when the shrink fails; it is never destroyed (NCCL's advice after a shrink), and its
     * launcher does not take that abort for a failure. Closing it closes the survivors' communicator
     * too (closing that one first is fine). Bounded by {@link CommunicatorOptions#initTimeout()};
     * an interrupt ends it with {@link CommunicatorAbortedException}, the interrupt status kept, this
     * communicator aborted and no new one made. Shrinking again with the same ranks returns the same
     * communicator; with other ranks, shrink the survivors' communicator instead.
     *
     * @param excludedRanks the ranks to leave out, in this communicator's numbering
     * @return the survivors' communicator (closed with this one, or by the caller)
     * @throws IllegalArgumentException      for null, no ranks, a rank out of range, a rank named twice,
     *                                       this rank, or every rank, before anything else
     * @throws IllegalStateException         when a transaction is open, another thread is shrinking this
     *                                       communicator, it is closed, or it was shrunk without other ranks
     * @throws UnsupportedOperationException when the launcher cannot shrink
     * @throws CommunicatorAbortedException  when the survivors did not all arrive in time, on interrupt,
     *                                       or when a survivor failed
     * @throws NcclException                 when NCCL refuses the new communicator
     */
    public Communicator shrink(int... excludedRanks) {
        return shrinks.shrink(excludedRanks);
    }

    /**
     * The ticket of a grow of this communicator to {@code newWorldSize} ranks: collective among this
     * communicator's ranks, each of which gets the same ticket; the launcher hands it to the new
     * ranks, which join with {@link #joinGrow}, while the existing ones call {@link #grow}. The ranks
     * agree here on how the grown communicator is made: NCCL's {@code ncclCommGrow} (NCCL 2.29.2+,
     * rank 0 gets the grow's id from {@code ncclCommGetUniqueId}) while every rank's communicator is
     * healthy (not aborted, no asynchronous error, nothing pending on its comms stream), else a new
     * communicator of all ranks with a fresh unique id (re-init). The system property
     * {@code jnccl.grow.path} ({@code auto}, {@code nccl}, {@code reinit}) overrides the choice;
     * {@code nccl} is refused on an NCCL without grow, naming the version needed and the one loaded.
     * Bounded by {@link CommunicatorOptions#initTimeout()}, interruptible. A second call with the
     * same size returns the same ticket.
     *
     * @param newWorldSize the number of ranks after the grow, above {@link #worldSize()}
     * @return the ticket, the same on every rank of this communicator
     * @throws IllegalArgumentException      for a size not above this world, before anything else
     * @throws IllegalStateException         when closed, a transaction is open, another thread is growing
     *                                       this communicator, or it has a ticket for another size
     * @throws UnsupportedOperationException for {@code jnccl.grow.path=nccl} on an NCCL without grow
     * @throws CommunicatorAbortedException  when the other ranks did not agree in time, or on interrupt
     */
    public GrowTicket growTicket(int newWorldSize) {
        return grows.ticket(newWorldSize);
    }

    /**
     * This rank's communicator after the grow of {@code ticket}: the same rank, in a world of
     * {@code ticket.toWorld()} ranks whose added ranks joined with {@link #joinGrow}; on the same
     * device with the same options. Collective among this communicator's ranks and the new ones, by
     * the path the ticket carries. This communicator is retired afterwards (aborted, never destroyed),
     * also when the grow fails (a new rank that never comes: the init timeout ends it); closing it
     * closes the grown one too. A second call with the same ticket returns the same communicator.
     * Bounded by {@link CommunicatorOptions#initTimeout()}, interruptible.
     *
     * @param ticket the ticket {@link #growTicket} gave this communicator
     * @return the grown communicator, to be closed by the caller (or through this one)
     * @throws IllegalArgumentException      for a null ticket or one this communicator did not make
     * @throws IllegalStateException         when closed, a transaction is open or another thread is growing it
     * @throws UnsupportedOperationException when the launcher cannot grow
     * @throws CommunicatorAbortedException  when a rank did not join in time, on interrupt, or when aborted
     * @throws NcclException                 when NCCL refuses the grown communicator
     */
    public Communicator grow(GrowTicket ticket) {
        return grows.grow(ticket);
    }

    /**
     * A new rank of a grow, for processes of the caller's own launcher (as {@link #initRank}, whose
     * host side over NCCL it gets): rank {@code rank} of {@code ticket.toWorld()}, joining the ranks
     * that call {@link #grow} with the same ticket. Waits up to {@link CommunicatorOptions#initTimeout()}.
     *
     * @param ticket  the ticket the existing ranks made ({@link GrowTicket#fromBytes} across processes)
     * @param rank    this rank, in {@code [ticket.fromWorld(), ticket.toWorld())}
     * @param device  the CUDA device of this rank (made the calling thread's current device)
     * @param options deadlines and diagnostics
     * @return the communicator, to be closed by the caller
     * @throws IllegalArgumentException      for a null ticket or options, a rank not among the added ones or
     *                                       a bad device, before any native call
     * @throws UnsupportedOperationException for a ticket of NCCL's grow on an NCCL without it
     * @throws CommunicatorAbortedException  when the other ranks did not join in time, or on interrupt
     * @throws NcclException                 when NCCL refuses the communicator
     */
    public static Communicator joinGrow(GrowTicket ticket, int rank, int device, CommunicatorOptions options) {
        Grows.checkJoin(ticket, rank, options);
        return join(ticket, rank, device, options, NcclHostSide.parts(() -> null));
    }

    /** The state a shrink needs: not closed, no transaction open. */
    void requireShrinkable() {
        requireShrinkable("shrink");
    }

    /** The state {@code operation} (a shrink, a grow) needs: not closed, no transaction open. */
    void requireShrinkable(String operation) {
        if (state.get() == CommState.State.CLOSED) {
            throw new IllegalStateException(operation + ": communicator of rank " + rank + " is closed");
        }
        nativeLock.lock();
        try {
            log.requireNoneOpen(operation);
        } finally {
            nativeLock.unlock();
        }
    }

    /** {@code failure} as {@link RankLostException} when it is an abort and ranks were lost (see {@link LostRanks}). */
    RuntimeException lossOr(RuntimeException failure) {
        return losses.or(failure);
    }

    /** {@return whether NCCL's handles of this communicator are still usable: neither aborted nor closed} */
    boolean isOpenOrRevoked() {
        CommState.State current = state.get();
        return current == CommState.State.OPEN || current == CommState.State.REVOKED;
    }

    /** {@return the grow of this communicator} */
    Grows grows() {
        return grows;
    }

    /** {@return the launcher's failure handling (a recovery asks it for replacement ranks)} */
    Failures failures() {
        return failures;
    }

    /** {@return the launcher's host side (a shrink asks it for the survivors' parts)} */
    HostSide hostSide() {
        return host;
    }

    /**
     * Ends this communicator for a shrink: aborted in NCCL (never destroyed) with {@code reason}
     * (after an earlier abort's reason), but without the launcher's failure handling: the loss it
     * answers is known already, and the survivors go on (MPI mode would end the job).
     */
    void retire(String reason) {
        lifecycle.retire(reason, List.of());
    }

    /**
     * {@link #retire(String)} by a shrink without ranks {@code excluded}: the children with an
     * excluded member are retired too, the others go on (see {@link Children#reachedBy}).
     */
    void retire(String reason, List<Integer> excluded) {
        lifecycle.retire(reason, excluded);
    }

    // ---------------------------------------------------------------- abort and close

    /**
     * Aborts the communicator (ncclCommAbort): pending and stuck operations end, every later use
     * and every thread waiting through this communicator gets {@link CommunicatorAbortedException}
     * with {@code reason}. Idempotent; callable from any thread. Communicators
     * {@linkplain #split split} from this one that are still open are aborted too.
     *
     * <p>NCCL's own abort can hang; it is waited for up to {@link CommunicatorOptions#closeTimeout()}
     * (at least 5 s). Past that the communicator is <i>abandoned</i>: this returns, the reason says
     * so from then on, and NCCL's communicator is leaked on purpose, never destroyed. An interrupt
     * ends the wait at once (the interrupt status is kept; NCCL's abort goes on, on its own thread).
     *
     * @param reason why; reported by every exception that follows
     */
    public void abort(String reason) {
        lifecycle.abort(reason, null);
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
        if (state.get() == CommState.State.CLOSED) {
            return;
        }
        waits.refuseInsideCapture("close"); // the close waits for the comms stream: CUDA forbids it in a capture
        replays.refuseOpenGraphs(rank, worldSize);
        Communicator survivors = shrinks.survivors();
        if (survivors != null) {
            survivors.close(); // made by this one's shrink: the launcher that closes this one closes it too
        }
        Communicator grown = grows.grown();
        if (grown != null) {
            grown.close(); // the same for the communicator its grow made
        }
        lifecycle.close();
    }

    /** {@link #abort} from a thread that holds the native lock: released for the abort, then taken again. */
    void abortHoldingLock(String reason) {
        nativeLock.unlock();
        try {
            abort(reason);
        } finally {
            nativeLock.lock();
        }
    }

    /**
     * The abort of NCCL's asynchronous error seen by a waiting thread that holds the native lock:
     * diagnosed first, as the watchdog's is, so that a peer that died (its process gone, NCCL's
     * "remote process exited") is named by the verdict on this rank too, not only by the watchdog's
     * later look; the lock is released for the exchange of summaries and the abort.
     */
    void abortDiagnosedHoldingLock(String reason) {
        nativeLock.unlock();
        try {
            lifecycle.abortDiagnosed(reason);
        } finally {
            nativeLock.lock();
        }
    }

    // ---------------------------------------------------------------- checks

    final void requireUsable(String operation) {
        if (!state.isOpen()) {
            // Out of line: the hot callers' compiled code stays small enough for C2 to inline them
            // (and to scalar-replace the transaction handle that begin returns).
            throw unusable(operation);
        }
    }

    private RuntimeException unusable(String operation) {
        CommState.State current = state.get();
        if (current == CommState.State.ABORTED) {
            failures.beforeAbortedException(state.reason());
            Diagnosis known = state.diagnosis();
            return losses.aborted(Diagnoses.lead(known, operation + ": communicator of rank " + rank
                    + " was aborted: " + state.reason()), null, known);
        }
        if (current == CommState.State.REVOKED) {
            return new CommunicatorAbortedException(operation + ": communicator of rank " + rank + " was revoked"
                    + " (Communicator.revoke): only shrink, abort and close remain");
        }
        return new IllegalStateException(operation + ": communicator of rank " + rank + " is closed");
    }

    /** The exception for a native call that failed because the communicator was aborted meanwhile. */
    CommunicatorAbortedException abortedDuring(String operation, RuntimeException failure) {
        failures.beforeAbortedException(state.reason());
        Throwable cause = failure;
        if (Thread.currentThread().isInterrupted()) {
            // The watchdog aborted because this thread was interrupted inside NCCL: as for the host
            // side's waits, the interrupt is the cause (the status stays set), NCCL's failure beside it.
            InterruptedException interrupted = new InterruptedException(operation + " interrupted inside NCCL");
            interrupted.addSuppressed(failure);
            cause = interrupted;
        }
        Diagnosis known = state.diagnosis();
        return losses.aborted(Diagnoses.lead(known, operation + ": communicator of rank " + rank
                + " was aborted while the call was in NCCL: " + state.reason()), cause, known);
    }

    /**
     * What a native call that failed (with the native lock held) throws: when another thread aborted
     * the communicator meanwhile (the watchdog, a failed peer, {@link #abort}), real NCCL fails the
     * call it was in (ncclGroupEnd answered ncclInternalError on a GPU), which says less than the
     * abort that caused it; otherwise the failure itself, and when {@code halfDone} (something may be
     * half enqueued) the communicator is aborted first: it cannot be trusted any more.
     */
    RuntimeException failedInNative(String operation, RuntimeException failure, boolean halfDone) {
        if (state.get() == CommState.State.ABORTED && !(failure instanceof CommunicatorAbortedException)) {
            return abortedDuring(operation, failure);
        }
        if (halfDone && !(failure instanceof CommunicatorAbortedException)) {
            abort(operation + " failed: " + failure.getMessage());
        }
        return losses.or(failure);
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
        return registrations.register(memory);
    }

    /** {@return what the calling thread does, for the execute pipeline's stages} */
    final Forensics forensics() {
        return forensics;
    }

    /** {@return the waits on this communicator's communication (the pipeline orders a convenience operation's stream through them)} */
    final Waits waits() {
        return waits;
    }

    /** {@return the NCCL side of this communicator (tests ask the emulation about its handle)} */
    NcclComm ncclComm() {
        return comm;
    }

    /** {@return the shrink's part (tests make one survivor's NCCL shrink fail through it)} */
    Shrinks shrinks() {
        return shrinks;
    }

    /** {@return the open transaction's commands (tests look at what the checks made)} */
    CommandBuffer pendingCommands() {
        return log.commands();
    }

    /** {@return how this communicator enqueues commands (tests force NCCL's older paths through it)} */
    CommandRunner commandRunner() {
        return commands;
    }

    /** {@return how this communicator splits, aborts and closes} */
    Lifecycle lifecycle() {
        return lifecycle;
    }

    /** {@return the argument checks of this rank, shared with its transactions} */
    final Checks checks() {
        return checks;
    }

    @Override
    public String toString() {
        return "Communicator[rank " + rank + " of " + worldSize + ", device " + device + ", " + state.get()
                + "]";
    }
}
