package dev.jnccl;

import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.internal.Backoff;
import dev.jnccl.internal.Events;
import dev.jnccl.internal.FlightRecorder;
import dev.jnccl.internal.NcclComm;
import dev.jnccl.internal.Resources;
import dev.jnccl.internal.Watchdog;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.Optional;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One rank's NCCL communicator, bound to one CUDA device, with its own comms stream. Work is
 * grouped in {@linkplain #begin(CudaEvent) transactions}; convenience operations cover the common
 * single collectives; host-side helpers ({@link #barrier()}, host gathers) are provided by the
 * subclass that knows how ranks meet (threads in one JVM, MPI processes, or a single rank).
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
public abstract class Communicator implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(Communicator.class);

    private enum State { OPEN, ABORTED, CLOSED }

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
    /** Polled by waits for the other ranks (init, split): a launcher's reason to give up early. */
    private final Supplier<String> initCancellation;
    /** The communicator this one was split from, or null. */
    private final Communicator parent;
    /** Live communicators split from this one; closed before this one. */
    private final Children children = new Children(lifecycle);
    private final Checks checks;
    private final CommandRunner commands;

    private volatile State state = State.OPEN;
    private volatile String abortReason;
    private Transaction openTransaction;
    private long sequence;

    /**
     * Creates this rank's communicator on {@code device} (made the calling thread's current device)
     * and waits, up to {@link CommunicatorOptions#initTimeout()}, for all ranks to join.
     *
     * @param id the unique id every rank of the communicator uses
     * @param rank this rank, in {@code [0, worldSize)}
     * @param worldSize the number of ranks
     * @param device the CUDA device of this rank
     * @param options deadlines and diagnostics
     * @throws IllegalArgumentException     for a bad rank, world size or device, before any native call
     * @throws NcclException                when NCCL refuses the communicator
     * @throws CommunicatorAbortedException when the other ranks did not join before the deadline
     */
    protected Communicator(UniqueId id, int rank, int worldSize, int device, CommunicatorOptions options) {
        this(id, rank, worldSize, device, options, () -> null);
    }

    /**
     * As {@link #Communicator(UniqueId, int, int, int, CommunicatorOptions)}, and the wait for the
     * other ranks also ends (with {@link CommunicatorAbortedException}) as soon as
     * {@code initCancellation} returns a reason: a launcher uses it when another rank has already
     * failed, so nobody waits for the full init timeout.
     *
     * @param id the unique id every rank of the communicator uses
     * @param rank this rank, in {@code [0, worldSize)}
     * @param worldSize the number of ranks
     * @param device the CUDA device of this rank
     * @param options deadlines and diagnostics
     * @param initCancellation polled while waiting; a non-null answer is the reason the init ends
     */
    protected Communicator(UniqueId id, int rank, int worldSize, int device, CommunicatorOptions options,
                           Supplier<String> initCancellation) {
        this(rank, worldSize, device, options, initCancellation, null, new ReentrantLock(),
                lock -> NcclComm.init(Objects.requireNonNull(id, "Communicator: unique id is null"), rank, worldSize,
                        device, options.mode(), options.initTimeout(), initCancellation, lock));
    }

    /**
     * The child communicator of a {@link #split}, built by {@link #newChild}: this rank of the
     * split's members, on the parent's device, with the parent's options and init cancellation.
     * It takes over the split's NCCL communicator (on failure the caller aborts it).
     *
     * @param split what {@link #split} made
     */
    protected Communicator(Split split) {
        this(Objects.requireNonNull(split, "Communicator: split is null").rank(), split.worldSize(),
                split.parent().device(), split.parent().options(), split.parent().initCancellation, split.parent(),
                split.comm().lock(), lock -> split.comm());
    }

    private Communicator(int rank, int worldSize, int device, CommunicatorOptions options,
                         Supplier<String> initCancellation, Communicator parent, ReentrantLock lock,
                         Function<ReentrantLock, NcclComm> connect) {
        Objects.requireNonNull(initCancellation, "Communicator: initCancellation is null");
        Objects.requireNonNull(options, "Communicator: options are null");
        this.checks = new Checks(rank, worldSize, device);
        this.libraries = checks.libraries();
        this.rank = rank;
        this.worldSize = worldSize;
        this.device = device;
        this.options = options;
        this.initCancellation = initCancellation;
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
            Resources.closeAll(created, e, LOG);
            throw e;
        }
        this.commands = new CommandRunner(this, comm, stream, libraries);
        long initMillis = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
        LOG.info("jnccl communicator ready: rank {} of {}{}, device {}, backend {}, mode {}, NCCL {}, CUDA runtime {}"
                        + " (driver {}), init {} ms", rank, worldSize, parent == null ? "" : " (split of rank "
                        + parent.rank + " of " + parent.worldSize + ")", device, libraries.backend().id(), options.mode(),
                libraries.nccl(), libraries.cudaRuntime(), libraries.cudaDriver(), initMillis);
        initEvent.commit(rank, worldSize, device, libraries.backend().id(), libraries.nccl().toString());
        watchdog = options.watchdogEnabled()
                ? new Watchdog(rank, comm, recorder, options.watchdogTimeout(), options.watchdogInterval(),
                        () -> state == State.OPEN, this::abort)
                : null;
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
        return new SingleRankCommunicator(device, options);
    }

    // ---------------------------------------------------------------- identity

    /**
     * This rank, in {@code [0, worldSize())}.
     *
     * @return this rank
     */
    public final int rank() {
        return rank;
    }

    /**
     * The number of ranks.
     *
     * @return the number of ranks
     */
    public final int worldSize() {
        return worldSize;
    }

    /** {@return the CUDA device of this rank} */
    public final int device() {
        return device;
    }

    /** {@return the comms stream: all communication of this communicator runs on it, in order} */
    public final CudaStream stream() {
        return stream;
    }

    /** {@return the NCCL version in use, e.g. "2.28.3"} */
    public final String ncclVersion() {
        return libraries.nccl().toString();
    }

    /** {@return {@link Backend#CUDA} (real NCCL) or {@link Backend#HOST} (the host emulation); see {@link JncclRuntime}} */
    public final Backend backend() {
        return JncclRuntime.backendOf(libraries);
    }

    /**
     * The options this communicator was created with.
     *
     * @return the options
     */
    public final CommunicatorOptions options() {
        return options;
    }

    /**
     * Whether the communicator was aborted (by {@link #abort}, a deadline or the watchdog).
     *
     * @return whether it was aborted
     */
    public final boolean isAborted() {
        return state == State.ABORTED;
    }

    /**
     * Whether {@link #close()} has run.
     *
     * @return whether it is closed
     */
    public final boolean isClosed() {
        return state == State.CLOSED;
    }

    /** {@return why the communicator was aborted, or null} */
    public final String abortReason() {
        return abortReason;
    }

    /** {@return the flight recorder's dump of the most recent transactions (for diagnostics)} */
    public final String recentTransactions() {
        return recorder.dump();
    }

    // ---------------------------------------------------------------- transactions

    /**
     * Starts a transaction whose commands run after {@code ready} (recorded on any stream, any device).
     *
     * @param ready the event the commands wait for
     * @return the open transaction; execute or close it
     */
    public final Transaction begin(CudaEvent ready) {
        Objects.requireNonNull(ready, "begin: ready event is null");
        if (ready.isClosed()) {
            throw new IllegalStateException("begin: ready event " + ready + " is closed");
        }
        return open("begin", ready);
    }

    /**
     * Starts a transaction whose commands run after all work enqueued on {@code waitFor} so far.
     *
     * @param waitFor the stream whose work so far the commands wait for
     * @return the open transaction; execute or close it
     */
    public final Transaction begin(CudaStream waitFor) {
        checks.requireStream("begin", waitFor);
        nativeLock.lock();
        try {
            requireUsable("begin");
            requireNoOpenTransaction("begin");
            waitFor.record(transactionReady);
        } finally {
            nativeLock.unlock();
        }
        return open("begin", transactionReady);
    }

    private Transaction open(String operation, CudaEvent ready) {
        nativeLock.lock();
        try {
            requireUsable(operation);
            requireNoOpenTransaction(operation);
            openTransaction = new Transaction(this, ready, ++sequence);
            return openTransaction;
        } finally {
            nativeLock.unlock();
        }
    }

    private void requireNoOpenTransaction(String operation) {
        if (openTransaction != null) {
            throw new IllegalStateException(operation + ": transaction #" + openTransaction.number() + " of rank " + rank
                    + " is still open; execute or close it first");
        }
    }

    void transactionEnded(Transaction transaction) {
        nativeLock.lock();
        try {
            if (openTransaction == transaction) {
                openTransaction = null;
            }
        } finally {
            nativeLock.unlock();
        }
    }

    void execute(Transaction transaction, CudaEvent signal) {
        Events.Transaction event = new Events.Transaction();
        event.begin();
        CommandBuffer buffer = transaction.buffer();
        List<Command> executed = List.copyOf(buffer.commands());
        nativeLock.lock();
        try {
            if (openTransaction == transaction) {
                openTransaction = null;
            }
            requireUsable("execute");
            throttleLaunchQueue(true);
            try {
                enqueue(transaction, signal, buffer, executed);
            } finally {
                throttleLaunchQueue(false);
            }
        } finally {
            nativeLock.unlock();
        }
        if (LOG.isDebugEnabled()) {
            LOG.debug("rank {} transaction #{}: {} command(s), {} bytes: {}", rank, transaction.number(),
                    executed.size(), CommandRunner.bytes(executed), executed);
        }
        event.commit(rank, transaction.number(), executed); // sizes summed only when JFR records it
    }

    private void enqueue(Transaction transaction, CudaEvent signal, CommandBuffer buffer, List<Command> executed) {
        stream.waitFor(transaction.ready());
        boolean enqueuing = false;
        try {
            onExecute(buffer);
            enqueuing = true;
            commands.run(executed);
            onFinish(signal);
            if (signal != null) {
                stream.record(signal);
            }
        } catch (RuntimeException e) {
            if (state == State.ABORTED && !(e instanceof CommunicatorAbortedException)) {
                // Aborted from another thread (watchdog, a failed peer of the pack, abort()) while this
                // one was inside NCCL: real NCCL then fails the call it was in (ncclGroupEnd answered
                // ncclInternalError on the H200), which says less than the abort that caused it.
                throw abortedDuring("execute of transaction #" + transaction.number(), e);
            }
            if (enqueuing && !(e instanceof CommunicatorAbortedException)) {
                // Something may be half enqueued: the communicator cannot be trusted any more.
                abort("execute of transaction #" + transaction.number() + " failed: " + e.getMessage());
            }
            throw e;
        } finally {
            buffer.clear();
        }
        if (watchdog != null) {
            watchdog.track(transaction.number(), executed, stream);
        } else {
            recorder.add(transaction.number(), executed, null);
        }
    }

    // ---------------------------------------------------------------- transports (hooks)

    /**
     * The all-gather of a transaction. Threads mode overrides it with device-to-device copies.
     *
     * @param gather the all-gather command
     */
    protected void gatherWeight(Command.Gather gather) {
        commands.allGather(gather);
    }

    /**
     * A send of a transaction. Threads mode may override it with device-to-device copies.
     *
     * @param send the send command
     */
    protected void send(Command.Send send) {
        commands.send(send);
    }

    /**
     * A receive of a transaction. Threads mode may override it with device-to-device copies.
     *
     * @param recv the receive command
     */
    protected void recv(Command.Recv recv) {
        commands.recv(recv);
    }

    /**
     * The all-to-all of a transaction, inside an NCCL group of its own (after the transaction's
     * group): {@code ncclAlltoAll} where the loaded NCCL has it, else a send and a receive per rank
     * (this rank included). Threads mode may override it with device-to-device copies.
     *
     * @param allToAll the all-to-all command
     */
    protected void allToAll(Command.AllToAll allToAll) {
        commands.allToAll(allToAll);
    }

    /** The all-to-all as a send and a receive of one slot per rank, in the open NCCL group (NCCL before 2.28). */
    final void allToAllBySendRecv(Command.AllToAll allToAll) {
        commands.allToAllBySendRecv(allToAll);
    }

    /**
     * Called with the commands before they are enqueued (threads mode matches memcpy transfers here).
     *
     * @param commands the transaction's commands
     */
    protected void onExecute(CommandBuffer commands) {}

    /**
     * Called after the commands were enqueued and right before {@code signal} (may be null) is
     * recorded on the comms stream: the place to make the comms stream wait for peers (threads
     * mode: until every peer has finished reading this rank's buffers).
     *
     * @param signal the event to be recorded after the commands, or null
     */
    protected void onFinish(CudaEvent signal) {}

    /**
     * Called before ({@code beforeTransaction} true) and after (false, also when the transaction
     * failed) each transaction. Threads mode uses it to keep one rank's thread from queuing far
     * ahead of the others (many GPUs driven from one process share the driver's launch queue); the
     * default does nothing.
     *
     * @param beforeTransaction true before the transaction, false after it
     */
    protected void throttleLaunchQueue(boolean beforeTransaction) {}

    /**
     * The reason recorded for an abort. A subclass that knows an earlier root cause (threads mode: a
     * rank of the pack failed, and the abort of its communicator reached this one as a remote error
     * first) puts it in front, so every rank's exception names the rank that failed.
     *
     * @param reason the reason given to {@link #abort}
     * @return the reason to record and report
     */
    protected String explainAbort(String reason) {
        return reason;
    }

    /**
     * Called once after the communicator was aborted, so subclasses can release waiting threads.
     *
     * @param reason the recorded reason
     */
    protected void onAbort(String reason) {}

    /**
     * Called once after {@link #onAbort} and the NCCL abort (ncclCommAbort has returned), on the
     * aborting thread. MPI mode ends the whole job here (MPI_Abort), so that peers blocked in NCCL
     * do not hang; the default does nothing.
     *
     * @param reason the recorded reason
     */
    protected void afterAbort(String reason) {}

    /**
     * Called on the calling thread when a call finds this communicator aborted, just before it throws
     * {@link CommunicatorAbortedException} (possibly holding the communicator's internal lock, so it
     * must not wait for this communicator). Threads mode waits here, bounded, until no peer still
     * copies from this rank's buffers, so that the caller may free them once the exception arrives.
     */
    protected void beforeAbortedException() {}

    /** Called once by {@link #close()} after NCCL is done with the comms stream: free subclass resources. */
    protected void onClose() {}

    // ---------------------------------------------------------------- convenience operations

    /**
     * In-place reduce-scatter (sum) of {@code tensor}, ordered after and before work on {@code stream}.
     *
     * @param tensor the tensor, world size times the shard
     * @param stream the stream the operation is ordered with
     */
    public final void reduceScatter(DeviceTensor tensor, CudaStream stream) {
        reduceScatter(List.of(Objects.requireNonNull(tensor, "reduceScatter: tensor is null")), stream);
    }

    /**
     * In-place reduce-scatter (sum) of each tensor, as one transaction ordered with {@code stream}.
     *
     * @param tensors the tensors, each world size times its shard
     * @param stream the stream the operation is ordered with
     */
    public final void reduceScatter(List<DeviceTensor> tensors, CudaStream stream) {
        Objects.requireNonNull(tensors, "reduceScatter: tensors is null");
        checks.requireStream("reduceScatter", stream);
        runOrdered("reduceScatter", stream, transaction -> {
            for (DeviceTensor tensor : tensors) {
                transaction.reduceScatter(tensor);
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
    public final void allReduce(DeviceTensor tensor, ReduceOp op, CudaStream stream) {
        Objects.requireNonNull(tensor, "allReduce: tensor is null");
        Objects.requireNonNull(op, "allReduce: op is null");
        checks.requireStream("allReduce", stream);
        runOrdered("allReduce", stream, transaction -> transaction.allReduce(tensor, op));
    }

    /**
     * In-place broadcast of {@code root}'s {@code tensor} to every rank, as one transaction ordered
     * after and before work on {@code stream}. See {@link Transaction#broadcast}.
     *
     * @param tensor the tensor (the source on {@code root})
     * @param root the rank whose tensor is broadcast
     * @param stream the stream the operation is ordered with
     */
    public final void broadcast(DeviceTensor tensor, int root, CudaStream stream) {
        checks.requireStream("broadcast", stream);
        checks.checkRoot("broadcast", root);
        runOrdered("broadcast", stream, transaction -> transaction.broadcast(tensor, root));
    }

    /**
     * All-to-all from {@code send} into {@code recv}, as one transaction ordered after and before
     * work on {@code stream}. See {@link Transaction#allToAll}.
     *
     * @param send this rank's slots, one per destination rank
     * @param recv where the slots from every rank land, in rank order
     * @param stream the stream the operation is ordered with
     */
    public final void allToAll(DeviceTensor send, DeviceTensor recv, CudaStream stream) {
        checks.requireStream("allToAll", stream);
        runOrdered("allToAll", stream, transaction -> transaction.allToAll(send, recv));
    }

    /**
     * The convenience operations: one transaction after the work on {@code stream} so far, then
     * {@code stream} waits for it. Going through a transaction gives them what transactions have:
     * the watchdog tracks them, the flight recorder lists them, threads mode throttles them.
     */
    private void runOrdered(String operation, CudaStream stream, Consumer<Transaction> commands) {
        try (Transaction transaction = open(operation, transactionReady)) {
            // The commands are checked before anything native happens; the ready event is recorded
            // after (nobody else can use it: the transaction is open).
            commands.accept(transaction);
            nativeLock.lock();
            try {
                requireUsable(operation);
                stream.record(transactionReady);
            } finally {
                nativeLock.unlock();
            }
            transaction.execute(null);
        }
        waitOnComms(stream);
    }

    /**
     * In-place mean over ranks ({@link ReduceOp#AVG}).
     *
     * @param tensor the tensor
     * @param stream the stream the operation is ordered with
     */
    public final void reduceMean(DeviceTensor tensor, CudaStream stream) {
        allReduce(tensor, ReduceOp.AVG, stream);
    }

    /**
     * In-place maximum over ranks.
     *
     * @param tensor the tensor
     * @param stream the stream the operation is ordered with
     */
    public final void reduceMax(DeviceTensor tensor, CudaStream stream) {
        allReduce(tensor, ReduceOp.MAX, stream);
    }

    /**
     * Sums one FP32 value (a local squared norm) over ranks, in place.
     *
     * @param value one FP32 element
     * @param stream the stream the operation is ordered with
     */
    public final void reduceNormSquared(DeviceTensor value, CudaStream stream) {
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
    public final void waitOnComms(CudaStream stream) {
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
     */
    public final void synchronize() {
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
     */
    public final void await(CudaEvent event) {
        Objects.requireNonNull(event, "await: event is null");
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
                    return;
                }
            } finally {
                nativeLock.unlock();
            }
            Backoff.pause(spins++);
        }
    }

    // ---------------------------------------------------------------- host side

    /** Blocks until every rank has called it. */
    public final void barrier() {
        requireUsable("barrier");
        hostBarrier();
    }

    /**
     * Gathers every rank's bytes on {@code root} (rank order); other ranks get an empty list.
     *
     * @param local this rank's bytes
     * @param root the rank that receives them all
     * @return every rank's bytes on {@code root}, an empty list elsewhere
     */
    public final List<byte[]> gatherBytesHost(byte[] local, int root) {
        Objects.requireNonNull(local, "gatherBytesHost: local is null");
        checks.checkRoot("gatherBytesHost", root);
        requireUsable("gatherBytesHost");
        return hostGather(local, root);
    }

    /**
     * Every rank's bytes, in rank order, on every rank.
     *
     * @param local this rank's bytes
     * @return every rank's bytes, in rank order
     */
    public final List<byte[]> allGatherBytesHost(byte[] local) {
        Objects.requireNonNull(local, "allGatherBytesHost: local is null");
        requireUsable("allGatherBytesHost");
        return hostAllGather(local);
    }

    /**
     * Every rank's {@code value}, in rank order, on every rank.
     *
     * @param value this rank's value
     * @return every rank's value, in rank order
     */
    public final long[] allGatherLongsHost(long value) {
        List<byte[]> all = allGatherBytesHost(ByteBuffer.allocate(Long.BYTES).putLong(value).array());
        long[] values = new long[all.size()];
        for (int i = 0; i < values.length; i++) {
            values[i] = ByteBuffer.wrap(all.get(i)).getLong();
        }
        return values;
    }

    /** The barrier of {@link #barrier()}, supplied by the subclass. */
    protected abstract void hostBarrier();

    /**
     * The gather of {@link #gatherBytesHost}, supplied by the subclass (arguments already checked).
     *
     * @param local this rank's bytes
     * @param root the rank that receives them all
     * @return every rank's bytes on {@code root}, an empty list elsewhere
     */
    protected abstract List<byte[]> hostGather(byte[] local, int root);

    /**
     * The all-gather of {@link #allGatherBytesHost}, supplied by the subclass.
     *
     * @param local this rank's bytes
     * @return every rank's bytes, in rank order
     */
    protected abstract List<byte[]> hostAllGather(byte[] local);

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
     * @throws UnsupportedOperationException when this kind of communicator has no {@link #newChild}
     * @throws NcclException                 when NCCL refuses the split
     * @throws CommunicatorAbortedException  when the other ranks did not split in time, or on abort
     */
    public final Optional<Communicator> split(int color, int key) {
        requireUsable("split");
        nativeLock.lock();
        try {
            requireNoOpenTransaction("split");
        } finally {
            nativeLock.unlock();
        }
        List<Integer> members = Children.members(hostAllGather(Children.colorAndKey(color, key)), color);
        int childRank = members.indexOf(rank);
        beforeSplit(color, key);
        ReentrantLock childLock = new ReentrantLock();
        NcclComm childComm;
        nativeLock.lock();
        try {
            requireUsable("split");
            childComm = comm.split(color, key, childRank, members.size(), options.initTimeout(), initCancellation,
                    childLock);
        } catch (RuntimeException e) {
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
            child = Objects.requireNonNull(newChild(new Split(this, color, key, childRank, members, childComm)),
                    "split: newChild returned null");
        } catch (RuntimeException | Error e) {
            childComm.abort();
            throw e;
        }
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
     * Called by {@link #split} on every rank of this communicator, members of a child or not
     * (negative color), after the colors and keys are exchanged and before NCCL splits: where a
     * subclass's host side needs every rank for its own split (MPI_Comm_split) or counts splits.
     * The default does nothing.
     *
     * @param color the color this rank passed to {@link #split}
     * @param key   the key this rank passed to {@link #split}
     */
    protected void beforeSplit(int color, int key) {}

    /**
     * Makes the subclass's communicator for one rank of a {@link #split}: usually a constructor of
     * the subclass that calls {@link #Communicator(Split)} and sets up host-side collectives
     * (barrier, gathers) among {@link Split#members()} only. Called on the splitting thread, after
     * NCCL has split, on every member rank. The default throws {@link UnsupportedOperationException}.
     *
     * @param split the split: parent, color, key, this rank's place and the members
     * @return the child communicator
     */
    protected Communicator newChild(Split split) {
        throw new UnsupportedOperationException("split: " + getClass().getSimpleName()
                + " does not support sub-communicators");
    }

    /**
     * The communicator this one was split from, if any.
     *
     * @return the parent, or empty for a communicator that was not made by {@link #split}
     */
    public final Optional<Communicator> parent() {
        return Optional.ofNullable(parent);
    }

    /**
     * What {@link #split} hands to {@link #newChild}: the parent, the color and key passed, this
     * rank's place in the new communicator, and its members (ranks of the parent, in the new
     * communicator's rank order), with the NCCL communicator that {@link Communicator#Communicator(Split)}
     * takes over.
     */
    public static final class Split {
        private final Communicator parent;
        private final int color;
        private final int key;
        private final int rank;
        private final List<Integer> members;
        private final NcclComm comm;

        Split(Communicator parent, int color, int key, int rank, List<Integer> members, NcclComm comm) {
            this.parent = parent;
            this.color = color;
            this.key = key;
            this.rank = rank;
            this.members = Collections.unmodifiableList(new ArrayList<>(members));
            this.comm = comm;
        }

        /** {@return the communicator that was split} */
        public Communicator parent() {
            return parent;
        }

        /** {@return the color this rank passed (non-negative)} */
        public int color() {
            return color;
        }

        /** {@return the key this rank passed} */
        public int key() {
            return key;
        }

        /** {@return this rank in the new communicator} */
        public int rank() {
            return rank;
        }

        /** {@return the number of ranks of the new communicator} */
        public int worldSize() {
            return members.size();
        }

        /** {@return the members' ranks in the parent, indexed by their rank in the new communicator} */
        public List<Integer> members() {
            return members;
        }

        NcclComm comm() {
            return comm;
        }

        @Override
        public String toString() {
            return "Split[color " + color + ", key " + key + ", rank " + rank + " of " + members.size()
                    + ", parent ranks " + members + "]";
        }
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
    public final void abort(String reason) {
        Objects.requireNonNull(reason, "abort: reason is null");
        String explained = explainAbort(reason);
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
        // First release threads the subclass keeps waiting (barriers): one of them may hold the lock.
        try {
            onAbort(explained);
        } catch (RuntimeException e) {
            LOG.warn("rank {}: onAbort hook failed", rank, e);
        }
        comm.abort();
        try {
            afterAbort(explained);
        } catch (RuntimeException e) {
            LOG.warn("rank {}: afterAbort hook failed", rank, e);
        }
    }

    /**
     * Waits for pending communication, finalizes and destroys the communicator, within
     * {@link CommunicatorOptions#closeTimeout()}; past the deadline it aborts instead. Idempotent.
     * Communicators {@linkplain #split split} from this one that are still open are closed first.
     */
    @Override
    public final void close() {
        synchronized (lifecycle) {
            if (state == State.CLOSED) {
                return;
            }
        }
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
        long deadline = System.nanoTime() + options.closeTimeout().toNanos();
        if (watchdog != null) {
            watchdog.stop();
        }
        // A thread held inside NCCL (blocking mode, a peer gone) is ended by an abort.
        if (!comm.lockForClose(options.closeTimeout(), () -> abort("close: another thread of rank " + rank
                + " did not leave NCCL within " + options.closeTimeout().toMillis()
                + " ms (CommunicatorOptions.closeTimeout)"))) {
            synchronized (lifecycle) {
                state = State.CLOSED;
            }
            return;
        }
        try {
            openTransaction = null;
            if (state == State.OPEN) {
                String failure = comm.finalizeAndDestroy(stream, deadline, options.closeTimeout());
                if (failure != null) {
                    LOG.warn("rank {}: {}; aborting instead", rank, failure);
                    abort(failure);
                }
            }
            synchronized (lifecycle) {
                state = State.CLOSED;
            }
            comm.closeArena();
            recorder.closeEvents();
            try {
                onClose();
            } catch (RuntimeException e) {
                LOG.warn("rank {}: onClose hook failed", rank, e);
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
        State current = state;
        if (current == State.OPEN) {
            return;
        }
        if (current == State.ABORTED) {
            beforeAbortedException();
            throw new CommunicatorAbortedException(operation + ": communicator of rank " + rank + " was aborted: "
                    + abortReason);
        }
        throw new IllegalStateException(operation + ": communicator of rank " + rank + " is closed");
    }

    /** The exception for a native call that failed because the communicator was aborted meanwhile. */
    private CommunicatorAbortedException abortedDuring(String operation, RuntimeException failure) {
        beforeAbortedException();
        return new CommunicatorAbortedException(operation + ": communicator of rank " + rank
                + " was aborted while the call was in NCCL: " + abortReason, failure);
    }

    /** {@return the argument checks of this rank, shared with its transactions} */
    final Checks checks() {
        return checks;
    }

    @Override
    public String toString() {
        return getClass().getSimpleName() + "[rank " + rank + " of " + worldSize + ", device " + device + ", " + state
                + "]";
    }
}
