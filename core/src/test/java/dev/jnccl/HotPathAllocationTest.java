package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.util.List;
import java.util.function.Consumer;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Named;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.slf4j.LoggerFactory;

/**
 * The hot path allocates nothing: a transaction (of 2 and of 4 commands) and every convenience
 * operation, called again and again with the same tensors as a training loop does, with the
 * watchdog and the flight recorder on (the defaults) and JFR off; so do the rooted and uneven
 * operations and the replay of a captured graph. Measured with the calling thread's allocation counter ({@code com.sun.management.ThreadMXBean}), never with a clock: after a
 * warm-up long enough for the JIT to compile the calls, the fewest bytes per call over several
 * windows must be below a bound smaller than any object, so one object per call (or per few calls)
 * fails it, while a stray allocation of the JIT or the runtime in one window does not.
 */
class HotPathAllocationTest {
    /** Calls before measuring: enough for C2 to compile the chain (its escape analysis removes the handle). */
    private static final int WARM_UP = 20_000;
    private static final int WINDOWS = 8;
    /** How long windows go on while none is clean yet (see allocatesNothingPerCall). */
    private static final long MEASURE_NANOS = 30_000_000_000L;
    private static final int PER_WINDOW = 2_048;
    /** Calls between two synchronizations (outside the measured windows), so the device queue stays bounded. */
    private static final int BATCH = 256;
    /** Below the smallest object (16 bytes): no call may allocate even one. */
    private static final double BOUND_BYTES_PER_CALL = 4;

    private Communicator comm;
    private CudaStream compute;
    private CudaEvent ready;
    private CudaEvent signal;
    private DeviceMemory memory;
    private DeviceMemory otherMemory;
    private DeviceTensor tensor;
    private DeviceTensor shard;
    private DeviceTensor other;
    private DeviceTensor one;
    /** The uneven all-to-all's counts (world 1: everything to itself). */
    private final long[] counts = {1024};
    private List<DeviceTensor> both;
    /** A captured all-reduce, made on first use by the replay case. */
    private CudaGraph graph;

    /** jnccl's log level before the test (logback without a configuration logs everything, at DEBUG). */
    private Object savedLevel;

    @BeforeEach
    void open() throws ReflectiveOperationException {
        // Debug logging builds a line per transaction (as it should); the hot path is measured as it
        // runs in production, at INFO.
        savedLevel = setJncclLogLevel("INFO");
        comm = Communicator.single(0);
        compute = CudaStream.create();
        ready = CudaEvent.create();
        signal = CudaEvent.create();
        memory = DeviceMemory.allocate(DType.FP32, 1024);
        otherMemory = DeviceMemory.allocate(DType.FP32, 1024);
        memory.fill((byte) 1, compute);
        otherMemory.fill((byte) 2, compute);
        tensor = memory.tensor(DType.FP32);
        shard = tensor.shard(comm.rank(), comm.worldSize());
        other = otherMemory.tensor(DType.FP32);
        one = tensor.slice(0, 1);
        both = List.of(tensor, other);
        compute.record(ready);
        compute.synchronize();
    }

    @AfterEach
    void close() throws ReflectiveOperationException {
        setJncclLogLevel(savedLevel);
        if (compute != null) {
            compute.synchronize();
        }
        if (graph != null) {
            graph.close(); // before the communicator: it refuses to close under an open graph
        }
        if (comm != null) {
            comm.close();
        }
        for (AutoCloseable closeable : new AutoCloseable[] {memory, otherMemory, signal, ready, compute}) {
            try {
                if (closeable != null) {
                    closeable.close();
                }
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        }
    }

    static Stream<Named<Consumer<HotPathAllocationTest>>> calls() {
        return Stream.of(
                Named.of("transaction: reduceScatter + allGather", t -> t.comm.begin(t.ready)
                        .reduceScatter(t.tensor).allGather(t.shard, t.tensor).execute(t.signal)),
                Named.of("transaction of 4 commands", t -> t.comm.begin(t.ready).reduceScatter(t.tensor)
                        .allGather(t.shard, t.tensor).allReduce(t.other, ReduceOp.SUM).broadcast(t.other, 0)
                        .execute(t.signal)),
                Named.of("allReduce", t -> t.comm.allReduce(t.tensor, ReduceOp.SUM, t.compute)),
                Named.of("reduceScatter", t -> t.comm.reduceScatter(t.tensor, t.compute)),
                Named.of("broadcast", t -> t.comm.broadcast(t.tensor, 0, t.compute)),
                Named.of("allToAll", t -> t.comm.allToAll(t.tensor, t.other, t.compute)),
                Named.of("reduceMean", t -> t.comm.reduceMean(t.tensor, t.compute)),
                Named.of("reduceMax", t -> t.comm.reduceMax(t.tensor, t.compute)),
                Named.of("reduceNormSquared", t -> t.comm.reduceNormSquared(t.one, t.compute)),
                Named.of("reduceScatter of a list", t -> t.comm.reduceScatter(t.both, t.compute)),
                Named.of("reduce", t -> t.comm.reduce(t.tensor, t.other, ReduceOp.SUM, 0, t.compute)),
                Named.of("gather", t -> t.comm.gather(t.tensor, t.other, 0, t.compute)),
                Named.of("scatter", t -> t.comm.scatter(t.other, t.tensor, 0, t.compute)),
                Named.of("uneven allToAll", t -> t.comm.allToAll(t.tensor, t.counts, t.other, t.counts, t.compute)),
                Named.of("transaction: reduce + gather + scatter + uneven allToAll", t -> t.comm.begin(t.ready)
                        .reduce(t.tensor, t.other, ReduceOp.SUM, 0).gather(t.tensor, t.other, 0)
                        .scatter(t.other, t.tensor, 0).allToAll(t.tensor, t.counts, t.other, t.counts)
                        .execute(t.signal)),
                Named.of("transaction: destructiveAllToAll", t -> t.comm.begin(t.ready).destructiveAllToAll(t.tensor)
                        .execute(t.signal)),
                Named.of("launch of a captured graph", t -> t.comm.launch(t.graph(), t.compute)));
    }

    /** The graph of the replay case: one all-reduce on the compute stream, captured once. */
    private CudaGraph graph() {
        if (graph == null) {
            graph = CudaGraph.capture(compute, () -> comm.allReduce(tensor, ReduceOp.SUM, compute));
        }
        return graph;
    }

    @ParameterizedTest
    @MethodSource("calls")
    void allocatesNothingPerCall(Consumer<HotPathAllocationTest> call) {
        AllocationCounter counter = AllocationCounter.create();
        for (int done = 0; done < WARM_UP; done += BATCH) {
            run(call, BATCH);
        }
        double fewest = Double.MAX_VALUE;
        StringBuilder windows = new StringBuilder();
        long start = System.nanoTime();
        int w = 0;
        // At least WINDOWS windows; more while none is clean yet, for up to MEASURE_NANOS: on a busy
        // machine C2 may compile the chain long after the warm-up's calls (they take microseconds,
        // a compile of the inlined chain hundreds of milliseconds), and code still in C1 allocates
        // what escape analysis would remove. Code that allocates per call fails after the bound.
        while (w < WINDOWS || (fewest >= BOUND_BYTES_PER_CALL && System.nanoTime() - start < MEASURE_NANOS)) {
            w++;
            long bytes = 0;
            for (int done = 0; done < PER_WINDOW; done += BATCH) {
                long before = counter.getCurrentThreadAllocatedBytes();
                for (int i = 0; i < BATCH; i++) {
                    call.accept(this);
                }
                bytes += counter.getCurrentThreadAllocatedBytes() - before;
                comm.synchronize(); // outside the count: bounds the device queue
                compute.synchronize();
            }
            double perCall = (double) bytes / PER_WINDOW;
            if (w <= 2 * WINDOWS) {
                windows.append(String.format(" %.2f", perCall));
            }
            fewest = Math.min(fewest, perCall);
        }
        assertTrue(fewest < BOUND_BYTES_PER_CALL, "bytes allocated per call in each window of " + PER_WINDOW
                + " calls after " + WARM_UP + " warm-up calls (" + w + " windows in "
                + (System.nanoTime() - start) / 1_000_000 + " ms; the first " + Math.min(w, 2 * WINDOWS) + "):"
                + windows + "; fewest " + String.format("%.2f", fewest) + "; expected fewer than " + BOUND_BYTES_PER_CALL + " (nothing) in at least one window");
    }

    /**
     * Sets the level of the "dev.jnccl" logger (a level name, a logback {@code Level}, or null: inherited)
     * through logback, the tests' SLF4J binding, looked up reflectively (core's module does not read
     * it); {@return the level it had}.
     */
    static Object setJncclLogLevel(Object level) throws ReflectiveOperationException {
        org.slf4j.Logger logger = LoggerFactory.getLogger("dev.jnccl");
        Class<?> levels = Class.forName("ch.qos.logback.classic.Level", true, logger.getClass().getClassLoader());
        Object saved = logger.getClass().getMethod("getLevel").invoke(logger);
        Object value = level instanceof String name ? levels.getMethod("toLevel", String.class).invoke(null, name) : level;
        logger.getClass().getMethod("setLevel", levels).invoke(logger, value);
        assertFalse(LoggerFactory.getLogger(Communicator.class).isDebugEnabled() && "INFO".equals(level),
                "debug logging still on for jnccl");
        return saved;
    }

    private void run(Consumer<HotPathAllocationTest> call, int calls) {
        for (int i = 0; i < calls; i++) {
            call.accept(this);
        }
        comm.synchronize();
        compute.synchronize();
    }
}
