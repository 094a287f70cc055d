package dev.jnccl.spi;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.Transaction;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaException;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.internal.Backoff;
import dev.jnccl.internal.Deadlines;
import dev.jnccl.internal.Native;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.Consumer;
import java.util.function.LongFunction;
import java.util.function.Supplier;

/**
 * A host side with no channel of its own: the barrier, the host gathers and a split's exchange of
 * colors run as NCCL collectives of the communicator itself, on a small device buffer and an internal
 * stream (as PyTorch's NCCL process group implements {@code barrier()}). For ranks that meet only
 * through the unique id: {@link Communicator#initRank} and launchers whose own rendezvous is too slow
 * to use per call (Spark barrier mode).
 *
 * <ul>
 *   <li>barrier: a one-element all-reduce, then a wait for it;</li>
 *   <li>host gathers: an all-gather of every rank's length, then one of the bytes padded to the
 *       longest; {@code gather} is the all-gather with the result kept on the root only;</li>
 *   <li>split: the colors and keys go through the all-gather; the new communicator gets a host side
 *       of this kind of its own.</li>
 * </ul>
 *
 * <p>Each call is a transaction of the communicator (the watchdog and the flight recorder see it),
 * so it fails with {@link IllegalStateException} while the calling rank has a transaction open.
 * Every wait polls (spin, then park; no busy spin) until the collective completes, the communicator
 * is aborted or closed, {@link HostSide#timeoutNanos(dev.jnccl.CommunicatorOptions) the host
 * timeout} passes, or the thread is interrupted; the last two end with {@link CommunicatorAbortedException} (the
 * interrupt as its cause, the interrupt status kept), and the communicator then aborts this rank.
 *
 * <p><b>What the other ranks see.</b> There is no side channel to tell them: NCCL cannot say which
 * rank did not arrive, and this rank's abort reaches the others only as NCCL reports it. A peer
 * waiting in a collective with the aborted rank ends when NCCL fails the collective (a remote error
 * over a network transport) or, at the latest, when its own watchdog (or host timeout) fires and
 * aborts it. A launcher that knows more (Spark kills the other tasks of a failed barrier stage)
 * ends the peers sooner.
 *
 * <p><b>Memory.</b> The device buffer is not freed when the communicator closes but kept, per
 * device, for the next host side (a few KiB per communicator, at most 64 buffers per device):
 * {@code cudaFree} waits for the whole device, which ranks sharing it may still use.
 */
public final class NcclHostSide implements HostSide, RankEvents, Failures {
    private static final long SLOT_ALIGNMENT = Long.BYTES;
    /**
     * Buffers of closed host sides, per device, for the next one: never handed to cudaFree while the
     * process runs, because cudaFree waits for the whole device, and with ranks of one process sharing
     * a GPU a peer may still be inside a collective whose kernels cannot launch until it returns (seen
     * as a hang at close with threads of one JVM on one GPU). Bounded: beyond it a buffer is freed.
     */
    private static final Map<Integer, Deque<DeviceMemory>> SPARE = new ConcurrentHashMap<>();
    private static final int SPARE_PER_DEVICE = 64;

    private final Supplier<String> cancellation;
    private final ReentrantLock lock = new ReentrantLock();
    private volatile boolean closed;
    private Communicator communicator;
    private CudaStream stream;
    private CudaEvent done;
    private DeviceMemory buffer;
    /** Buffers outgrown by a longer host gather (each at least twice the one before). */
    private final List<DeviceMemory> retired = new ArrayList<>();
    private Arena hostArena;
    private MemorySegment host;

    /** A host side with no cancellation of its own while the ranks create or split a communicator. */
    public NcclHostSide() {
        this(() -> null);
    }

    /**
     * A host side whose waits for the other ranks to create or split a communicator also end when
     * {@code cancellation} gives a reason (a launcher that learns another rank failed: a killed task).
     *
     * @param cancellation polled while waiting; a non-null answer ends the wait with that reason
     */
    public NcclHostSide(Supplier<String> cancellation) {
        this.cancellation = Objects.requireNonNull(cancellation, "NcclHostSide: cancellation is null");
    }

    /**
     * The parts of a rank whose host side is this kind's, with every command moving through NCCL.
     * The host side is also the parts' {@link RankEvents} (its stream and buffer live from
     * {@link #attached} to {@link #closed}) and {@link Failures} ({@code cancellation} only: with no
     * side channel it has nothing to tell the other ranks).
     *
     * @param cancellation see {@link #NcclHostSide(Supplier)}
     * @return the parts
     */
    public static RankParts parts(Supplier<String> cancellation) {
        NcclHostSide host = new NcclHostSide(cancellation);
        return new RankParts(host, Transport.NCCL, host, host);
    }

    @Override
    public void attached(Communicator communicator) {
        lock.lock();
        try {
            if (this.communicator != null) {
                throw new IllegalStateException("NcclHostSide: already serves " + this.communicator
                        + "; each communicator needs its own");
            }
            this.communicator = communicator;
            // Made on the creating thread, whose current device is the communicator's.
            stream = CudaStream.create();
            done = CudaEvent.create();
            hostArena = Arena.ofShared();
        } finally {
            lock.unlock();
        }
    }

    @Override
    public String cancellation() {
        return cancellation.get();
    }

    @Override
    public void barrier(long timeoutNanos) {
        call("barrier", timeoutNanos, deadline -> {
            DeviceTensor one = reserve(SLOT_ALIGNMENT).tensor(DType.INT32).slice(0, 1);
            run("barrier", deadline, transaction -> transaction.allReduce(one, ReduceOp.SUM));
            return null;
        });
    }

    @Override
    public List<byte[]> gather(byte[] local, int root, long timeoutNanos) {
        List<byte[]> all = allGather(local, timeoutNanos);
        return communicator.rank() == root ? all : List.of();
    }

    @Override
    public List<byte[]> allGather(byte[] local, long timeoutNanos) {
        return call("allGatherBytesHost", timeoutNanos, deadline -> {
            int world = communicator.worldSize();
            long[] lengths = exchangeLengths(local.length, deadline);
            long longest = 0;
            for (long length : lengths) {
                longest = Math.max(longest, length);
            }
            List<byte[]> all = new ArrayList<>(world);
            if (longest == 0) {
                for (int r = 0; r < world; r++) {
                    all.add(new byte[0]);
                }
                return all;
            }
            long slot = roundUp(longest);
            DeviceMemory memory = reserve(slot);
            DeviceTensor full = memory.tensor(DType.BYTE).slice(0, world * slot);
            DeviceTensor shard = memory.tensor(DType.BYTE).slice(world * slot, slot);
            upload(MemorySegment.ofArray(local), shard);
            run("allGatherBytesHost", deadline, transaction -> transaction.allGather(shard, full));
            MemorySegment gathered = download(memory, world * slot);
            for (int r = 0; r < world; r++) {
                all.add(gathered.asSlice(r * slot, lengths[r]).toArray(ValueLayout.JAVA_BYTE));
            }
            return all;
        });
    }

    /** Every rank's length, by an all-gather of one INT64 each. */
    private long[] exchangeLengths(long length, long deadline) {
        int world = communicator.worldSize();
        DeviceMemory memory = reserve(SLOT_ALIGNMENT);
        DeviceTensor full = memory.tensor(DType.INT64).slice(0, world);
        DeviceTensor shard = memory.tensor(DType.INT64).slice(world, 1);
        upload(MemorySegment.ofArray(new long[] {length}), shard);
        run("allGatherBytesHost", deadline, transaction -> transaction.allGather(shard, full));
        return download(memory, (long) world * Long.BYTES).toArray(ValueLayout.JAVA_LONG_UNALIGNED);
    }

    @Override
    public RankParts split(Membership membership) {
        return parts(cancellation);
    }

    /** The grown world's host side is again the grown communicator's own NCCL collectives. */
    @Override
    public RankParts grow(Communicator existing, dev.jnccl.GrowTicket ticket) {
        return parts(cancellation);
    }

    @Override
    public void closed(boolean aborted) {
        closed = true;
        if (lock.tryLock()) { // else the thread inside a call frees them on its way out
            try {
                free();
            } finally {
                lock.unlock();
            }
        }
    }

    /** One host-side call: this host side's state is used by one thread at a time, and freed by the last one out. */
    private <T> T call(String operation, long timeoutNanos, LongFunction<T> body) {
        long deadline = Deadlines.deadline(System.nanoTime(), timeoutNanos);
        try {
            if (!lock.tryLock(timeoutNanos, TimeUnit.NANOSECONDS)) {
                throw timedOut(operation, " another thread of this rank held its host side");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw interrupted(operation, e);
        }
        try {
            if (closed || communicator == null) {
                throw new IllegalStateException(operation + ": the communicator's host side is "
                        + (closed ? "closed" : "not attached yet"));
            }
            return body.apply(deadline);
        } finally {
            lock.unlock();
            if (closed && lock.tryLock()) { // closed() found the lock held: free here
                try {
                    free();
                } finally {
                    lock.unlock();
                }
            }
        }
    }

    /** The device buffer with room for every rank's slot of {@code slot} bytes and this rank's own after them. */
    private DeviceMemory reserve(long slot) {
        long needed = (communicator.worldSize() + 1L) * slot;
        if (buffer == null || buffer.bytes() < needed) {
            if (buffer != null) {
                // Kept with the host side, not freed now: cudaFree waits for the whole device, and a
                // rank sharing it may be inside a collective that waits for this one.
                retired.add(buffer);
            }
            long size = Math.max(needed, Math.max(256, 2 * (buffer == null ? 0 : buffer.bytes())));
            buffer = spare(communicator.device(), needed);
            if (buffer == null) {
                buffer = DeviceMemory.allocate(size);
            }
        }
        return buffer;
    }

    /** A spare buffer of {@code device} with at least {@code bytes}, or null. */
    private static DeviceMemory spare(int device, long bytes) {
        Deque<DeviceMemory> spares = SPARE.get(device);
        if (spares == null) {
            return null;
        }
        synchronized (spares) {
            for (var it = spares.iterator(); it.hasNext(); ) {
                DeviceMemory memory = it.next();
                if (memory.bytes() >= bytes) {
                    it.remove();
                    return memory;
                }
            }
        }
        return null;
    }

    /** Keeps {@code memory} for a later host side of its device (see {@link #SPARE}). */
    private static void keep(DeviceMemory memory) {
        Deque<DeviceMemory> spares = SPARE.computeIfAbsent(memory.device(), d -> new ArrayDeque<>());
        synchronized (spares) {
            if (spares.size() < SPARE_PER_DEVICE) {
                spares.add(memory);
                return;
            }
        }
        memory.close();
    }

    /** Copies {@code bytes} into {@code target} in order on the internal stream, which the next transaction waits for. */
    private void upload(MemorySegment bytes, DeviceTensor target) {
        long size = bytes.byteSize();
        if (size == 0) {
            return;
        }
        // A native staging copy that lives as long as this host side: the copy may still be pending
        // when this call returns from cudaMemcpyAsync (the host emulation runs it on the stream).
        if (host == null || host.byteSize() < size) {
            host = hostArena.allocate(Math.max(size, 256), 16);
        }
        MemorySegment.copy(bytes, 0, host, 0, size);
        int code = CudaRuntime.cudaMemcpyAsync(MemorySegment.ofAddress(target.address()), host, size,
                CudaRuntime.cudaMemcpyHostToDevice(), stream.handle());
        if (code != 0) {
            throw new CudaException("cudaMemcpyAsync", code, Native.cudaErrorText(code), communicator.rank(),
                    communicator.device());
        }
    }

    /** The first {@code bytes} of {@code memory}, after the collective that wrote them completed. */
    private static MemorySegment download(DeviceMemory memory, long bytes) {
        MemorySegment target = MemorySegment.ofArray(new byte[Math.toIntExact(bytes)]);
        memory.copyToHost(target);
        return target;
    }

    /** One transaction ordered after the uploads, then a bounded wait for it. */
    private void run(String operation, long deadline, Consumer<Transaction> commands) {
        try (Transaction transaction = communicator.begin(stream)) {
            commands.accept(transaction);
            transaction.execute(done);
        }
        long spins = 0;
        while (!done.isComplete()) {
            if (communicator.isAborted() || communicator.isClosed()) {
                throw new CommunicatorAbortedException(operation + ": communicator of rank " + communicator.rank()
                        + " was " + (communicator.isAborted() ? "aborted: " + communicator.abortReason() : "closed")
                        + " while waiting for the other ranks");
            }
            if (Deadlines.passed(deadline)) {
                throw timedOut(operation, "");
            }
            if (Backoff.pauseOrInterrupted(spins++)) {
                throw interrupted(operation, new InterruptedException(operation + " interrupted"));
            }
        }
        // A collective that a peer's abort or failure ended still completes its event: NCCL says so
        // only through the asynchronous error, which await checks on a completed event (aborting
        // this rank). Without it the host call would return as if every rank had taken part.
        try {
            communicator.await(done);
        } catch (CommunicatorAbortedException e) {
            throw new CommunicatorAbortedException(operation + ": rank " + communicator.rank()
                    + "'s collective with the other ranks failed: " + communicator.abortReason(), e);
        }
    }

    private CommunicatorAbortedException timedOut(String operation, String why) {
        return new CommunicatorAbortedException(operation + ": rank " + communicator.rank() + " of "
                + communicator.worldSize() + " waited past the host-side timeout (the watchdog's) for the other"
                + " ranks" + (why.isEmpty() ? ": one did not call it or is stuck (with no side channel NCCL cannot"
                + " tell which)" : ":" + why));
    }

    private CommunicatorAbortedException interrupted(String operation, InterruptedException cause) {
        return new CommunicatorAbortedException(operation + ": rank " + (communicator == null ? "?"
                : communicator.rank()) + " was interrupted while waiting for the other ranks; aborting it", cause);
    }

    private static long roundUp(long bytes) {
        return (bytes + SLOT_ALIGNMENT - 1) / SLOT_ALIGNMENT * SLOT_ALIGNMENT;
    }

    /** Frees the stream, event and buffers, once; the internal stream only ever holds uploads, so its sync is short. */
    private void free() {
        if (stream == null) {
            return;
        }
        try {
            stream.synchronize(); // pending uploads read the staging copy
        } catch (RuntimeException e) {
            // an interrupted or failed sync: the stream is destroyed all the same
        }
        if (buffer != null) {
            retired.add(buffer);
            buffer = null;
        }
        retired.forEach(NcclHostSide::keep);
        retired.clear();
        done.close();
        stream.close();
        stream = null;
        hostArena.close();
        host = null;
    }
}
