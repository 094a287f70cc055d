package dev.jnccl.cuda;

import dev.jnccl.NativeLibraryException;
import dev.jnccl.bindings.CudaGraphs;
import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.VersionCodes;
import dev.jnccl.internal.Captures;
import dev.jnccl.internal.Native;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A CUDA graph captured from the work that code enqueues on a stream, ready to be launched again
 * and again: kernels launched by another library, copies, and jnccl transactions (whose comms
 * stream joins the capture through the ready event). A launch replays the whole captured step with
 * one call instead of one per operation.
 *
 * <pre>{@code
 * try (CudaGraph step = CudaGraph.capture(stream, () -> {
 *     ready.record(stream);
 *     comm.begin(ready).reduceScatter(grads).allGather(shard, grads).execute(done);
 *     stream.waitFor(done); // joins the comms stream back into the capture
 * })) {
 *     for (int i = 0; i < steps; i++) {
 *         comm.launch(step, stream); // tracked by the communicator's watchdog; step.launch(stream) is not
 *     }
 *     stream.synchronize();
 * }
 * }</pre>
 *
 * <p>During the capture, work is recorded, not run; CUDA forbids waiting for or querying the
 * capturing work (and, in the thread-local mode used here, any wait or query from the capturing
 * thread): jnccl refuses its own such calls ({@link CudaStream#synchronize}, {@link CudaEvent#isComplete},
 * {@code Communicator.synchronize} ...) with an {@link IllegalStateException} instead of letting
 * them invalidate the capture. Every stream that joined the capture must be joined back into the
 * capturing stream (by waiting on an event recorded on it) before the capture ends. A graph holds
 * the device addresses it captured: the memory must outlive it.
 */
public final class CudaGraph implements AutoCloseable {
    private static final AtomicLong IDS = new AtomicLong();
    /** Captures in progress, made by {@link #capture}: while 0, the checks below cost one volatile read. */
    private static final AtomicInteger CAPTURES = new AtomicInteger();
    /** The stream the current thread captures on, inside {@link #capture}. */
    private static final ThreadLocal<CudaStream> CAPTURING = new ThreadLocal<>();
    /** The id the graph captured by the current thread will have, inside {@link #capture}. */
    private static final ThreadLocal<Long> CAPTURE_ID = new ThreadLocal<>();
    /** The ids of the graphs instantiated and not closed yet: a communicator asks before it closes. */
    private static final Set<Long> LIVE = ConcurrentHashMap.newKeySet();

    private final long id;
    private final MemorySegment exec;
    private final int device;
    /** Guarded by this object's monitor: a close cannot destroy the graph under a running launch. */
    private boolean closed;

    private CudaGraph(long id, MemorySegment exec, int device) {
        this.id = id;
        this.exec = exec;
        this.device = device;
    }

    /**
     * Captures the work that {@code body} enqueues on {@code stream} (and on the streams that join
     * the capture) into a graph, without running it. The capture is thread-local
     * ({@code cudaStreamCaptureModeThreadLocal}): other threads may go on using CUDA meanwhile.
     * Whatever happens, the capture is ended before this method returns: when {@code body} throws,
     * its exception is rethrown and the partial graph destroyed; when CUDA refuses the capture
     * (e.g. a stream joined the capture but was never joined back), a {@link CudaException} names
     * the CUDA error.
     *
     * @param stream the stream to capture on (not capturing already)
     * @param body   the code that enqueues the work, run once on this thread
     * @return the instantiated graph, to be closed by the caller
     * @throws IllegalStateException  when the stream is closed or already capturing, or this thread is
     *                                already inside a capture
     * @throws CudaException          when CUDA fails to capture or instantiate
     * @throws NativeLibraryException when the loaded CUDA runtime is older than 12.0
     */
    public static CudaGraph capture(CudaStream stream, Runnable body) {
        Objects.requireNonNull(stream, "capture: stream is null");
        Objects.requireNonNull(body, "capture: body is null");
        MemorySegment handle = stream.handle();
        requireCapturable(stream);
        CudaCalls.check(CudaGraphs.cudaStreamBeginCapture(handle, CudaGraphs.CAPTURE_MODE_THREAD_LOCAL),
                "cudaStreamBeginCapture", stream.device());
        // The id is taken when the capture begins: the work captured meanwhile (jnccl transactions)
        // is filed under the id the graph will have.
        long id = IDS.incrementAndGet();
        Throwable failure = runCapturing(stream, id, body);
        return endCapture(stream, handle, id, failure);
    }

    /** Refuses a capture CUDA cannot make: a runtime older than 12.0, a nested capture, a capturing stream. */
    private static void requireCapturable(CudaStream stream) {
        LoadedLibraries libraries = CudaCalls.libraries();
        if (!CudaGraphs.isSupportedBy(libraries.cudaRuntimeVersion())) {
            throw new NativeLibraryException("capture: CUDA graphs need CUDA runtime "
                    + VersionCodes.text(CudaGraphs.SINCE_VERSION) + " or newer; the loaded one is "
                    + VersionCodes.text(libraries.cudaRuntimeVersion()), null);
        }
        CudaStream outer = CAPTURING.get();
        if (outer != null) {
            throw new IllegalStateException("capture: this thread is already capturing on " + outer
                    + "; captures do not nest");
        }
        if (stream.isCapturing()) {
            throw new IllegalStateException("capture: " + stream + " is already capturing");
        }
    }

    /**
     * Runs {@code body} with this thread marked as capturing on {@code stream} into graph {@code id}
     * (what {@link #currentCapture} and the refusals of waits read); returns what it threw, or null.
     */
    private static Throwable runCapturing(CudaStream stream, long id, Runnable body) {
        CAPTURING.set(stream);
        CAPTURE_ID.set(id);
        CAPTURES.incrementAndGet();
        try {
            body.run();
            return null;
        } catch (Throwable t) {
            return t;
        } finally {
            CAPTURING.remove();
            CAPTURE_ID.remove();
            CAPTURES.decrementAndGet();
        }
    }

    /**
     * Ends the capture on {@code handle} whatever happened, and instantiates the captured graph as
     * graph {@code id}; when the body failed, rethrows its {@code failure} instead (a failed end
     * suppressed in it). The captured graph is destroyed either way.
     */
    private static CudaGraph endCapture(CudaStream stream, MemorySegment handle, long id, Throwable failure) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ValueLayout.ADDRESS);
            int ended = CudaGraphs.cudaStreamEndCapture(handle, out);
            MemorySegment graph = out.get(ValueLayout.ADDRESS, 0);
            try {
                if (failure != null) {
                    if (ended != 0) {
                        failure.addSuppressed(new CudaException("cudaStreamEndCapture", ended,
                                Native.cudaErrorText(ended), -1, stream.device()));
                    }
                    throw sneaky(failure);
                }
                CudaCalls.check(ended, "cudaStreamEndCapture", stream.device());
                CudaCalls.check(CudaGraphs.cudaGraphInstantiate(out, graph, 0), "cudaGraphInstantiate",
                        stream.device());
                CudaGraph made = new CudaGraph(id, out.get(ValueLayout.ADDRESS, 0), stream.device());
                LIVE.add(id);
                return made;
            } finally {
                if (!graph.equals(MemorySegment.NULL)) {
                    // The executable graph does not need the graph it was made from.
                    CudaGraphs.cudaGraphDestroy(graph);
                }
            }
        }
    }

    @SuppressWarnings("unchecked")
    private static <T extends Throwable> RuntimeException sneaky(Throwable t) throws T {
        throw (T) t; // a Runnable throws only unchecked exceptions and errors: rethrown unchanged
    }

    /**
     * The stream the calling thread is capturing on, inside {@link #capture}'s body.
     *
     * @return the stream, or empty outside a capture
     */
    public static Optional<CudaStream> currentCapture() {
        return CAPTURES.get() == 0 ? Optional.empty() : Optional.ofNullable(CAPTURING.get());
    }

    static {
        // A communicator files the transactions captured meanwhile under the graph's id and refuses
        // to close while a graph that holds them is open; it asks through Captures, not through
        // public methods of this class.
        Captures.install(new Captures.Source() {
            @Override
            public long currentCaptureId() {
                if (CAPTURES.get() == 0) {
                    return 0;
                }
                Long id = CAPTURE_ID.get();
                return id == null ? 0 : id;
            }

            @Override
            public boolean isOpen(long id) {
                return LIVE.contains(id);
            }
        });
    }

    /**
     * Enqueues the whole graph on {@code stream}, after the work enqueued there before; it runs
     * after any earlier launch of this graph. Returns once enqueued.
     *
     * @param stream the stream to launch on (not capturing)
     * @throws IllegalStateException when this graph or the stream is closed, or the stream is capturing
     * @throws CudaException         when CUDA refuses the launch
     */
    public synchronized void launch(CudaStream stream) {
        requireOpen("launch");
        Objects.requireNonNull(stream, "launch: stream is null");
        MemorySegment handle = stream.handle();
        if (CAPTURES.get() != 0 && stream.isCapturing()) {
            throw new IllegalStateException("launch: " + stream + " is capturing; launching " + this
                    + " into another capture is not supported");
        }
        CudaCalls.check(CudaGraphs.cudaGraphLaunch(exec, handle), "cudaGraphLaunch", stream.device());
    }

    /** {@return this graph's number in the process, for logs and messages} */
    public long id() {
        return id;
    }

    /** {@return the device the graph was captured on} */
    public int device() {
        return device;
    }

    /** {@return whether {@link #close()} has run} */
    public synchronized boolean isClosed() {
        return closed;
    }

    /** Destroys the graph (launches already enqueued still run, as in CUDA); idempotent. */
    @Override
    public synchronized void close() {
        if (!closed) {
            closed = true;
            LIVE.remove(id);
            CudaCalls.check(CudaGraphs.cudaGraphExecDestroy(exec), "cudaGraphExecDestroy", device);
        }
    }

    private void requireOpen(String operation) {
        if (closed) {
            throw new IllegalStateException(operation + ": " + this + " is closed");
        }
    }

    /**
     * Refuses a wait or query of {@code target} made by a thread inside {@link #capture}: CUDA
     * forbids it in a thread-local capture and would invalidate the capture.
     */
    static void refuseOnCapturingThread(String operation, Object target) {
        if (CAPTURES.get() == 0) {
            return;
        }
        CudaStream capturing = CAPTURING.get();
        if (capturing != null) {
            throw new IllegalStateException(operation + ": " + target + " cannot be waited for or queried while this"
                    + " thread captures a CUDA graph on " + capturing + " (CudaGraph.capture): CUDA forbids it and"
                    + " would invalidate the capture; wait after the capture, or after launching the graph");
        }
    }

    /** {@return whether a capture made by {@link #capture} may be in progress on some thread} */
    static boolean anyCapture() {
        return CAPTURES.get() != 0;
    }

    @Override
    public String toString() {
        return "CudaGraph#" + id + "[device " + device + (isClosed() ? ", closed" : "") + "]";
    }
}
