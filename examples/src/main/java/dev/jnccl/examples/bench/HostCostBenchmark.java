package dev.jnccl.examples.bench;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NativeLibraries;
import dev.jnccl.bindings.NcclConfigs;
import dev.jnccl.bindings.VersionCodes;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.bindings.nccl.ncclConfig_t;
import dev.jnccl.bindings.nccl.ncclUniqueId;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.examples.ExampleSupport;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Locale;
import java.util.concurrent.TimeUnit;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Warmup;
import org.openjdk.jmh.infra.BenchmarkParams;
import org.openjdk.jmh.infra.IterationParams;

/**
 * Host cost of enqueuing communication, world size 1 on device 0, small tensors: what a training
 * step pays on the CPU per transaction, through jnccl and through the raw generated bindings. The
 * C program {@code examples/src/main/c/transaction_overhead.c} makes the same native calls from C.
 *
 * <ul>
 *   <li>{@code transaction}: {@code comm.begin(ready).reduceScatter(t).allGather(shard, t).execute(signal)}
 *       — natively cudaStreamWaitEvent, ncclGroupStart, ncclReduceScatter, ncclAllGather,
 *       ncclGroupEnd (then, should it return ncclInProgress on a non-blocking communicator,
 *       polling ncclCommGetAsyncError until the group is launched) and cudaEventRecord. {@code ready} was recorded once, in setup.</li>
 *   <li>{@code transactionRawBindings}: the same native calls through {@code dev.jnccl.bindings}
 *       directly, on a communicator created with the bindings ({@code comm} = blocking or
 *       nonblocking; jnccl's own run in the mode of {@code CommunicatorOptions}, {@code BLOCKING_SPLIT}
 *       by default, which the benchmark prints).</li>
 *   <li>{@code allReduceEnqueue}: {@code comm.allReduce(t, SUM, compute)} — an ncclAllReduce in a
 *       group plus the ordering with the caller's stream (2 event records, 2 stream waits).</li>
 *   <li>{@code allReduceEnqueueRaw}: ncclAllReduce alone on the comms stream, through the bindings.</li>
 *   <li>{@code transaction4}: a transaction of 4 commands (reduce-scatter, all-gather, all-reduce,
 *       broadcast), and {@code reduceScatterEnqueue}, {@code broadcastEnqueue}, {@code allToAllEnqueue},
 *       {@code reduceMeanEnqueue}, {@code reduceMaxEnqueue}, {@code reduceNormSquaredEnqueue}: the other
 *       convenience operations, ordered with the compute stream as {@code allReduceEnqueue} is. With
 *       {@code -prof gc} they show what every hot-path call allocates (0 bytes in steady state).</li>
 *   <li>{@code graphStepEager} / {@code graphReplay}: a step of 1, 8 or 32 such transactions, enqueued one
 *       by one, or captured once into a CUDA graph and replayed with {@code comm.launch(graph, compute)}.</li>
 * </ul>
 *
 * <p>Every variant synchronizes the comms stream ({@code graphReplay}: the compute stream, which its
 * launches run on, as C's graph_replay) after every 256th operation
 * ({@link QueueBound#SYNC_EVERY}), inside the measured method, so the device queue stays bounded;
 * the cost of that synchronization is amortized into every variant in the same way (the C program
 * does the same). After each iteration a line "# host-only ...: N us/op without the
 * synchronizations" gives the host-only cost: when it is far below JMH's score, the device (or, on
 * the host emulation, its stream threads) set the pace, not the host.
 *
 * <p>Only the convenience operations (the {@code *Enqueue} variants but {@code allReduceEnqueueRaw})
 * enqueue work on the caller's (compute) stream: an event record
 * and a wait for the comms stream per operation, which can all complete once the comms stream is
 * synchronized, so that synchronization bounds the compute stream's queue too. Teardown
 * synchronizes the compute stream.
 *
 * <p>The backend is chosen like everywhere in jnccl, by the system property {@code jnccl.backend}
 * (auto, cuda, host) of the forked JVM: pass it with {@code -jvmArgsAppend -Djnccl.backend=cuda}.
 * The forks get {@code --enable-native-access=ALL-UNNAMED} through {@code jvmArgsPrepend}, so a
 * {@code -jvmArgsAppend} on the command line does not replace it.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.MICROSECONDS)
// Warm-up by time, 5 s: on a loaded 2-core machine C2 compiled the transaction's path only after 3-5 s,
// and until then C1's code allocates the transaction handle (24-27 B/op in the first measured iterations).
@Warmup(iterations = 5, time = 1, timeUnit = TimeUnit.SECONDS)
@Measurement(iterations = 5, time = 1, timeUnit = TimeUnit.SECONDS)
@Fork(value = 1, jvmArgsPrepend = {"--enable-native-access=ALL-UNNAMED", "-Xss2m"})
public class HostCostBenchmark {
    /** Created by JMH. */
    public HostCostBenchmark() {}

    private static final int DEVICE = 0;

    /**
     * What both states share: the queue bound, started and read around every iteration (JMH runs the
     * helper methods a state inherits).
     */
    public abstract static class Bounded {
        QueueBound queue;

        /** For the states that extend it. */
        protected Bounded() {}

        /** Starts the host-only clock of an iteration. */
        @Setup(Level.Iteration)
        public void startIteration() {
            queue.startIteration();
        }

        /**
         * Prints the host-only time of the iteration (the synchronizations left out).
         *
         * @param benchmark the benchmark's parameters
         * @param iteration the iteration's parameters
         */
        @TearDown(Level.Iteration)
        public void endIteration(BenchmarkParams benchmark, IterationParams iteration) {
            queue.endIteration(benchmark, iteration);
        }
    }

    /** jnccl: a world-1 communicator, a compute stream with a ready event, a signal event, one FP32 tensor. */
    @State(Scope.Thread)
    public static class JncclState extends Bounded {
        /** Created by JMH. */
        public JncclState() {}

        /** Elements (FP32) of the tensor. */
        @Param("1024")
        public int count;

        /**
         * "on" (the default, as for users) or "off" ({@code CommunicatorOptions.withoutWatchdog()}):
         * {@code -p watchdog=on,off} gives the watchdog's share of the host cost.
         */
        @Param("on")
        public String watchdog;

        Communicator comm;
        CudaStream commsStream;
        CudaStream compute;
        CudaEvent ready;
        CudaEvent signal;
        DeviceMemory memory;
        DeviceTensor tensor;
        DeviceTensor shard;
        /** The receive side of the all-to-all (the tensors must not overlap), the size of {@code tensor}. */
        DeviceMemory otherMemory;
        DeviceTensor other;
        /** One FP32 element, as reduceNormSquared takes. */
        DeviceTensor one;

        /** Creates the communicator, streams, events and tensor. */
        @Setup(Level.Trial)
        public void setUp() {
            rehearse();
            comm = Communicator.single(DEVICE, options());
            commsStream = comm.stream();
            compute = CudaStream.create();
            ready = CudaEvent.create();
            signal = CudaEvent.create();
            memory = DeviceMemory.allocate(DType.FP32, count);
            memory.fill((byte) 0, compute);
            tensor = memory.tensor(DType.FP32);
            shard = tensor.shard(comm.rank(), comm.worldSize());
            otherMemory = DeviceMemory.allocate(DType.FP32, count);
            otherMemory.fill((byte) 0, compute);
            other = otherMemory.tensor(DType.FP32);
            one = tensor.slice(0, 1);
            compute.record(ready);
            compute.synchronize();
            queue = new QueueBound(commsStream::synchronize);
            System.out.println("# jnccl backend " + ExampleSupport.backendName(comm.backend()) + ", NCCL " + comm.ncclVersion() + ", "
                    + count + " x FP32, communicator mode " + comm.options().mode() + ", watchdog " + watchdog);
            prepared();
        }

        private CommunicatorOptions options() {
            return switch (watchdog) {
                case "on" -> CommunicatorOptions.defaults();
                case "off" -> CommunicatorOptions.defaults().withoutWatchdog();
                default -> throw new IllegalArgumentException("watchdog must be on or off, not " + watchdog);
            };
        }

        /**
         * A throwaway communicator, used once and closed, before the measured one: JMH runs the trial's
         * teardown inside the last measurement iteration, so the first close of a JVM (classes loaded,
         * call sites linked: about 2 MB) would land in that iteration's {@code -prof gc} figure as
         * several bytes per operation that no operation allocates. A second close allocates little.
         */
        private void rehearse() {
            try (Communicator throwaway = Communicator.single(DEVICE);
                 DeviceMemory scratch = DeviceMemory.allocate(DType.FP32, count)) {
                scratch.fill((byte) 0, throwaway.stream());
                DeviceTensor all = scratch.tensor(DType.FP32);
                throwaway.begin(throwaway.stream()).reduceScatter(all).allGather(all.shard(0, 1), all).execute(null);
                throwaway.synchronize();
            }
        }

        /** What a subclass adds once the communicator is ready (JMH does not order a subclass's setup after this one). */
        void prepared() {}

        /** What a subclass closes before the communicator. */
        void closing() {}

        /** Closes what setUp made. */
        @TearDown(Level.Trial)
        public void tearDown() {
            compute.synchronize();
            closing();
            comm.close();
            memory.close();
            otherMemory.close();
            signal.close();
            ready.close();
            compute.close();
        }
    }

    /**
     * {@link JncclState} plus a step of {@code transactions} transactions (a reduce-scatter and an
     * all-gather each, begun on the compute stream) captured once into a CUDA graph, made and closed
     * through the hooks of {@link JncclState}'s setup and teardown.
     */
    @State(Scope.Thread)
    public static class GraphState extends JncclState {
        /** Created by JMH. */
        public GraphState() {}

        /** Transactions in the step. */
        @Param({"1", "8", "32"})
        public int transactions;

        CudaGraph graph;
        DeviceMemory stepMemory;
        DeviceTensor src;
        DeviceTensor part;
        /** Whether the benchmark is {@link #graphReplay}: its queue bound synchronizes the compute stream. */
        boolean replay;

        /**
         * Which benchmark runs: {@link #graphReplay} launches on the compute stream, which C's
         * graph_replay synchronizes, {@link #graphStepEager} runs its collectives on the comms stream,
         * which C's graph_step_eager synchronizes; each bound synchronizes the same stream as its C twin.
         *
         * @param benchmark the benchmark's parameters
         */
        @Setup(Level.Trial)
        public void chooseStream(BenchmarkParams benchmark) {
            replay = benchmark.getBenchmark().endsWith(".graphReplay");
        }

        @Override
        void prepared() {
            // Read at each synchronization: JMH does not order this setup after chooseStream.
            queue = new QueueBound(() -> (replay ? compute : commsStream).synchronize());
            // Out of place: in place on one rank NCCL enqueues nothing, and the graph would be empty.
            stepMemory = DeviceMemory.allocate(DType.FP32, count + count / comm.worldSize());
            stepMemory.fill((byte) 0, compute);
            src = stepMemory.tensor(DType.FP32).slice(0, count);
            part = stepMemory.tensor(DType.FP32).slice(count, count / comm.worldSize());
            graph = CudaGraph.capture(compute, () -> step(this));
            compute.synchronize();
        }

        @Override
        void closing() {
            graph.close(); // before the communicator, which refuses to close while it is open
            stepMemory.close();
        }
    }

    /** The step of {@link GraphState}: {@code transactions} transactions after the compute stream, which waits for them. */
    static void step(GraphState s) {
        for (int i = 0; i < s.transactions; i++) {
            s.comm.begin(s.compute).reduceScatter(s.src, s.part, ReduceOp.SUM).allGather(s.part, s.tensor).execute(null);
        }
        s.comm.waitOnComms(s.compute);
    }

    /** Raw bindings: a communicator, streams, events and memory made directly with the generated bindings. */
    @State(Scope.Thread)
    public static class RawState extends Bounded {
        private static final int CUDA_SUCCESS = 0;

        /** Created by JMH. */
        public RawState() {}

        /**
         * "nonblocking" (ncclConfig_t.blocking = 0, as jnccl's NON_BLOCKING mode) or "blocking" (NCCL's
         * default); also "split" ({@code -p comm=split}): a non-blocking communicator split into a
         * blocking child sharing its resources, the child running the calls, as jnccl's default
         * {@code BLOCKING_SPLIT} does (jnccl's twin communicator).
         */
        @Param({"nonblocking", "blocking"})
        public String comm;

        /** The non-blocking parent of a "split" communicator, else null. */
        MemorySegment parent;

        /** Elements (FP32) of the tensor. */
        @Param("1024")
        public int count;

        int ncclSuccess;
        int ncclInProgress;
        int ncclFloat;
        int ncclSum;
        Arena arena;
        MemorySegment ncclComm;
        MemorySegment commsStream;
        MemorySegment compute;
        MemorySegment ready;
        MemorySegment signal;
        MemorySegment buffer;
        MemorySegment shard;
        MemorySegment asyncError;
        long shardCount;

        /** Creates the communicator, streams, events and memory through the bindings. */
        @Setup(Level.Trial)
        public void setUp() {
            boolean blocking = switch (comm) {
                case "blocking" -> true;
                case "nonblocking", "split" -> false;
                default -> throw new IllegalArgumentException("comm must be blocking, nonblocking or split, not " + comm);
            };
            LoadedLibraries libraries = NativeLibraries.load();
            ncclSuccess = Nccl.ncclSuccess();
            ncclInProgress = Nccl.ncclInProgress();
            ncclFloat = Nccl.ncclFloat32();
            ncclSum = Nccl.ncclSum();
            arena = Arena.ofShared();
            asyncError = arena.allocate(JAVA_INT);
            cuda(CudaRuntime.cudaSetDevice(DEVICE), "cudaSetDevice");
            MemorySegment out = arena.allocate(ADDRESS);
            int streamFlags = CudaRuntime.cudaStreamNonBlocking();
            cuda(CudaRuntime.cudaStreamCreateWithFlags(out, streamFlags), "cudaStreamCreateWithFlags");
            commsStream = out.get(ADDRESS, 0);
            cuda(CudaRuntime.cudaStreamCreateWithFlags(out, streamFlags), "cudaStreamCreateWithFlags");
            compute = out.get(ADDRESS, 0);
            int eventFlags = CudaRuntime.cudaEventDisableTiming();
            cuda(CudaRuntime.cudaEventCreateWithFlags(out, eventFlags), "cudaEventCreateWithFlags");
            ready = out.get(ADDRESS, 0);
            cuda(CudaRuntime.cudaEventCreateWithFlags(out, eventFlags), "cudaEventCreateWithFlags");
            signal = out.get(ADDRESS, 0);
            long bytes = (long) count * Float.BYTES;
            cuda(CudaRuntime.cudaMalloc(out, bytes), "cudaMalloc");
            buffer = out.get(ADDRESS, 0);
            cuda(CudaRuntime.cudaMemsetAsync(buffer, 0, bytes, compute), "cudaMemsetAsync");
            cuda(CudaRuntime.cudaEventRecord(ready, compute), "cudaEventRecord");
            cuda(CudaRuntime.cudaStreamSynchronize(compute), "cudaStreamSynchronize");
            // World 1: this rank's shard is the whole buffer.
            shardCount = count;
            shard = buffer;

            MemorySegment id = ncclUniqueId.allocate(arena);
            nccl(Nccl.ncclGetUniqueId(id), "ncclGetUniqueId");
            MemorySegment config = NcclConfigs.allocate(arena);
            ncclConfig_t.blocking(config, blocking ? 1 : 0);
            int result = Nccl.ncclCommInitRankConfig(out, 1, id, 0, config);
            ncclComm = out.get(ADDRESS, 0);
            if (result == ncclInProgress) {
                awaitComm("ncclCommInitRankConfig");
            } else {
                nccl(result, "ncclCommInitRankConfig");
            }
            if (comm.equals("split")) {
                splitBlockingChild(out);
            }
            queue = new QueueBound(() -> cuda(CudaRuntime.cudaStreamSynchronize(commsStream), "cudaStreamSynchronize"));
            System.out.println("# raw bindings: backend " + libraries.backend().id() + ", NCCL "
                    + VersionCodes.text(libraries.ncclVersion()) + ", " + count + " x FP32, " + comm + " communicator");
        }

        /**
         * Splits the non-blocking communicator into a blocking child that shares its resources
         * ({@code splitShare = 1}), as jnccl's {@code BLOCKING_SPLIT}: the child becomes {@link #ncclComm}.
         * The split is a job of the non-blocking parent: the child handle appears once it has finished.
         */
        private void splitBlockingChild(MemorySegment out) {
            parent = ncclComm;
            MemorySegment config = NcclConfigs.allocate(arena);
            ncclConfig_t.blocking(config, 1);
            ncclConfig_t.splitShare(config, 1);
            out.set(ADDRESS, 0, MemorySegment.NULL);
            int result = Nccl.ncclCommSplit(parent, 0, 0, out, config);
            if (result != ncclInProgress) {
                nccl(result, "ncclCommSplit");
            }
            awaitComm("ncclCommSplit");
            ncclComm = out.get(ADDRESS, 0);
            if (ncclComm.equals(MemorySegment.NULL)) {
                throw new IllegalStateException("ncclCommSplit finished without a child communicator");
            }
        }

        /** A group end (or an ungrouped collective): on a non-blocking communicator, waits until it is launched. */
        void ended(int result, String function) {
            if (result == ncclInProgress) {
                awaitComm(function);
            } else if (result != ncclSuccess) {
                throw new IllegalStateException(function + " failed: NCCL error " + result);
            }
        }

        /** Busy-polls ncclCommGetAsyncError until the communicator's last call has finished (non-blocking mode). */
        void awaitComm(String function) {
            RawTwin.awaitComm(ncclComm, asyncError, function);
        }

        void nccl(int result, String function) {
            if (result != ncclSuccess) {
                throw new IllegalStateException(function + " failed: NCCL error " + result);
            }
        }

        static void cuda(int code, String function) {
            if (code != CUDA_SUCCESS) {
                throw new IllegalStateException(function + " failed: CUDA error " + code);
            }
        }

        /** Destroys what setUp made. */
        @TearDown(Level.Trial)
        public void tearDown() {
            cuda(CudaRuntime.cudaStreamSynchronize(commsStream), "cudaStreamSynchronize");
            int result = Nccl.ncclCommFinalize(ncclComm);
            if (result == ncclInProgress) {
                awaitComm("ncclCommFinalize");
            } else {
                nccl(result, "ncclCommFinalize");
            }
            nccl(Nccl.ncclCommDestroy(ncclComm), "ncclCommDestroy");
            if (parent != null) {
                ncclComm = parent; // awaitComm polls it
                result = Nccl.ncclCommFinalize(parent);
                if (result == ncclInProgress) {
                    awaitComm("ncclCommFinalize");
                } else {
                    nccl(result, "ncclCommFinalize");
                }
                nccl(Nccl.ncclCommDestroy(parent), "ncclCommDestroy");
            }
            cuda(CudaRuntime.cudaFree(buffer), "cudaFree");
            cuda(CudaRuntime.cudaEventDestroy(signal), "cudaEventDestroy");
            cuda(CudaRuntime.cudaEventDestroy(ready), "cudaEventDestroy");
            cuda(CudaRuntime.cudaStreamDestroy(compute), "cudaStreamDestroy");
            cuda(CudaRuntime.cudaStreamDestroy(commsStream), "cudaStreamDestroy");
            arena.close();
        }
    }

    /**
     * One jnccl transaction: ready wait + reduce-scatter + all-gather + signal.
     *
     * @param s the state
     */
    @Benchmark
    public void transaction(JncclState s) {
        s.comm.begin(s.ready).reduceScatter(s.tensor).allGather(s.shard, s.tensor).execute(s.signal);
        s.queue.tick();
    }

    /**
     * The native calls of {@link #transaction} through the generated bindings.
     *
     * @param s the state
     */
    @Benchmark
    public void transactionRawBindings(RawState s) {
        RawState.cuda(CudaRuntime.cudaStreamWaitEvent(s.commsStream, s.ready, 0), "cudaStreamWaitEvent");
        s.nccl(Nccl.ncclGroupStart(), "ncclGroupStart");
        s.nccl(Nccl.ncclReduceScatter(s.buffer, s.shard, s.shardCount, s.ncclFloat, s.ncclSum, s.ncclComm,
                s.commsStream), "ncclReduceScatter");
        s.nccl(Nccl.ncclAllGather(s.shard, s.buffer, s.shardCount, s.ncclFloat, s.ncclComm, s.commsStream),
                "ncclAllGather");
        s.ended(Nccl.ncclGroupEnd(), "ncclGroupEnd");
        RawState.cuda(CudaRuntime.cudaEventRecord(s.signal, s.commsStream), "cudaEventRecord");
        s.queue.tick();
    }

    /**
     * A step of {@code transactions} transactions enqueued one by one: the eager baseline of
     * {@link #graphReplay} (its score is per step, not per transaction).
     *
     * @param s the state
     */
    @Benchmark
    public void graphStepEager(GraphState s) {
        step(s);
        s.queue.tick();
    }

    /**
     * The same step replayed from its CUDA graph through {@code Communicator.launch}: pace, one
     * cudaGraphLaunch on the compute stream, then an event record there, which the comms stream
     * waits for before its next work (here the watchdog's probe, once per interval; the compute
     * stream's wait for the comms stream is skipped: nothing ran there since the last replay), one
     * flight recorder entry, whatever the number of transactions. C's twins: graph_replay (the
     * launch alone), graph_replay_ordered (the same native calls).
     *
     * @param s the state
     */
    @Benchmark
    public void graphReplay(GraphState s) {
        s.comm.launch(s.graph, s.compute);
        s.queue.tick();
    }

    /**
     * jnccl's all-reduce on a caller stream (ordering with that stream included).
     *
     * @param s the state
     */
    @Benchmark
    public void allReduceEnqueue(JncclState s) {
        s.comm.allReduce(s.tensor, ReduceOp.SUM, s.compute);
        s.queue.tick();
    }

    /**
     * ncclAllReduce alone on the comms stream, through the generated bindings.
     *
     * @param s the state
     */
    @Benchmark
    public void allReduceEnqueueRaw(RawState s) {
        s.ended(Nccl.ncclAllReduce(s.buffer, s.buffer, s.count, s.ncclFloat, s.ncclSum, s.ncclComm, s.commsStream),
                "ncclAllReduce");
        s.queue.tick();
    }

    /**
     * A transaction of 4 commands: reduce-scatter, all-gather, all-reduce and broadcast.
     *
     * @param s the state
     */
    @Benchmark
    public void transaction4(JncclState s) {
        s.comm.begin(s.ready).reduceScatter(s.tensor).allGather(s.shard, s.tensor).allReduce(s.other, ReduceOp.SUM)
                .broadcast(s.other, 0).execute(s.signal);
        s.queue.tick();
    }

    /**
     * jnccl's in-place reduce-scatter (sum) on a caller stream.
     *
     * @param s the state
     */
    @Benchmark
    public void reduceScatterEnqueue(JncclState s) {
        s.comm.reduceScatter(s.tensor, s.compute);
        s.queue.tick();
    }

    /**
     * jnccl's in-place broadcast from rank 0 on a caller stream.
     *
     * @param s the state
     */
    @Benchmark
    public void broadcastEnqueue(JncclState s) {
        s.comm.broadcast(s.tensor, 0, s.compute);
        s.queue.tick();
    }

    /**
     * jnccl's all-to-all between two tensors on a caller stream.
     *
     * @param s the state
     */
    @Benchmark
    public void allToAllEnqueue(JncclState s) {
        s.comm.allToAll(s.tensor, s.other, s.compute);
        s.queue.tick();
    }

    /**
     * jnccl's in-place mean over ranks on a caller stream.
     *
     * @param s the state
     */
    @Benchmark
    public void reduceMeanEnqueue(JncclState s) {
        s.comm.reduceMean(s.tensor, s.compute);
        s.queue.tick();
    }

    /**
     * jnccl's in-place maximum over ranks on a caller stream.
     *
     * @param s the state
     */
    @Benchmark
    public void reduceMaxEnqueue(JncclState s) {
        s.comm.reduceMax(s.tensor, s.compute);
        s.queue.tick();
    }

    /**
     * jnccl's sum of one FP32 value over ranks on a caller stream.
     *
     * @param s the state
     */
    @Benchmark
    public void reduceNormSquaredEnqueue(JncclState s) {
        s.comm.reduceNormSquared(s.one, s.compute);
        s.queue.tick();
    }
}
