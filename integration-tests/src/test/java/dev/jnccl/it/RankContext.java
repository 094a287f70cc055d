package dev.jnccl.it;

import dev.jnccl.Backend;
import dev.jnccl.Communicator;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.lang.foreign.MemorySegment;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.function.Consumer;

/**
 * What one rank's work needs in a test: its communicator, the run's seed, device memory, events
 * and streams it owns (freed on {@link #close()}, after the streams are idle), and synchronous
 * host/device copies of typed arrays.
 */
final class RankContext implements AutoCloseable {
    final Communicator comm;
    final int rank;
    final int world;
    /** Whether results must match the reference bit for bit (host emulation) or within a tolerance (CUDA). */
    final boolean exact;
    final long seed;
    private final Deque<AutoCloseable> owned = new ArrayDeque<>();
    private final List<CudaStream> streams = new ArrayList<>();
    private CudaStream compute;
    /** Where resources go that cannot be freed now (see {@link #leftoversTo}); null: they are leaked. */
    private Consumer<AutoCloseable> leftovers;

    RankContext(Communicator comm, long seed) {
        this.comm = comm;
        this.rank = comm.rank();
        this.world = comm.worldSize();
        this.exact = comm.backend() == Backend.HOST;
        this.seed = seed;
    }

    /** A message prefix that says where a check failed and how to reproduce it. */
    String what(String check) {
        return check + " [rank " + rank + " of " + world + ", backend " + comm.backend() + ", seed " + seed + "]";
    }

    long seed(int ofRank, String tag) {
        return Data.seed(seed, ofRank, tag);
    }

    /** The float data {@code tag} of every rank, in rank order. */
    List<float[]> fp32All(String tag, int count) {
        List<float[]> all = new ArrayList<>();
        for (int r = 0; r < world; r++) {
            all.add(Data.fp32(seed(r, tag), count));
        }
        return all;
    }

    List<short[]> bf16All(String tag, int count) {
        List<short[]> all = new ArrayList<>();
        for (int r = 0; r < world; r++) {
            all.add(Data.bf16(seed(r, tag), count));
        }
        return all;
    }

    List<int[]> int32All(String tag, int count) {
        List<int[]> all = new ArrayList<>();
        for (int r = 0; r < world; r++) {
            all.add(Data.int32(seed(r, tag), count));
        }
        return all;
    }

    /**
     * Makes {@link #close()} after an abort, and {@link #abandon()}, hand this rank's resources to
     * {@code sink} instead of leaking them, so that a test running many failing packs can free them
     * once the pack has ended (no peer's stream can use them any more then).
     */
    RankContext leftoversTo(Consumer<AutoCloseable> sink) {
        this.leftovers = sink;
        return this;
    }

    /**
     * For a rank whose work failed: gives up its resources without waiting for its streams (a
     * peer that never comes may keep them busy until the pack is aborted).
     */
    void abandon() {
        dropOwned();
    }

    /** Hands everything owned to {@link #leftovers}, newest first, or forgets it. */
    private void dropOwned() {
        while (!owned.isEmpty()) {
            AutoCloseable resource = owned.pop();
            if (leftovers != null) {
                leftovers.accept(resource);
            }
        }
    }

    // ------------------------------------------------------------------ resources

    /** This rank's compute stream (created on first use). */
    CudaStream compute() {
        if (compute == null) {
            compute = newStream();
        }
        return compute;
    }

    CudaStream newStream() {
        CudaStream stream = own(CudaStream.create());
        streams.add(stream);
        return stream;
    }

    CudaEvent event() {
        return own(CudaEvent.create());
    }

    DeviceTensor alloc(DType dtype, long count) {
        return own(DeviceMemory.allocate(dtype, count)).tensor(dtype).slice(0, count);
    }

    DeviceTensor upload(float[] values) {
        DeviceTensor tensor = alloc(DType.FP32, values.length);
        write(tensor, values);
        return tensor;
    }

    DeviceTensor upload(short[] bf16) {
        DeviceTensor tensor = alloc(DType.BF16, bf16.length);
        write(tensor, bf16);
        return tensor;
    }

    DeviceTensor upload(int[] values) {
        DeviceTensor tensor = alloc(DType.INT32, values.length);
        write(tensor, values);
        return tensor;
    }

    /** A tensor of {@code dtype} holding {@code raw} (little-endian elements; length a multiple of the size). */
    DeviceTensor upload(DType dtype, byte[] raw) {
        if (raw.length % dtype.size() != 0) {
            throw new IllegalArgumentException(raw.length + " bytes are not whole " + dtype + " elements");
        }
        DeviceTensor tensor = alloc(dtype, raw.length / dtype.size());
        view(tensor).copyFromHost(MemorySegment.ofArray(raw));
        return tensor;
    }

    /** The raw bytes of {@code tensor}, whatever its dtype. */
    byte[] raw(DeviceTensor tensor) {
        byte[] values = new byte[Math.toIntExact(tensor.bytes())];
        view(tensor).copyToHost(MemorySegment.ofArray(values));
        return values;
    }

    private <T extends AutoCloseable> T own(T resource) {
        owned.push(resource);
        return resource;
    }

    // ------------------------------------------------------------------ synchronous copies

    private DeviceMemory view(DeviceTensor tensor) {
        return DeviceMemory.wrap(tensor.address(), Math.max(1, tensor.bytes()), comm.device());
    }

    void write(DeviceTensor tensor, float[] values) {
        check(tensor, DType.FP32, values.length);
        view(tensor).copyFromHost(MemorySegment.ofArray(values));
    }

    void write(DeviceTensor tensor, short[] values) {
        check(tensor, DType.BF16, values.length);
        view(tensor).copyFromHost(MemorySegment.ofArray(values));
    }

    void write(DeviceTensor tensor, int[] values) {
        check(tensor, DType.INT32, values.length);
        view(tensor).copyFromHost(MemorySegment.ofArray(values));
    }

    float[] floats(DeviceTensor tensor) {
        float[] values = new float[Math.toIntExact(tensor.count())];
        check(tensor, DType.FP32, values.length);
        view(tensor).copyToHost(MemorySegment.ofArray(values));
        return values;
    }

    short[] bf16(DeviceTensor tensor) {
        short[] values = new short[Math.toIntExact(tensor.count())];
        check(tensor, DType.BF16, values.length);
        view(tensor).copyToHost(MemorySegment.ofArray(values));
        return values;
    }

    int[] ints(DeviceTensor tensor) {
        int[] values = new int[Math.toIntExact(tensor.count())];
        check(tensor, DType.INT32, values.length);
        view(tensor).copyToHost(MemorySegment.ofArray(values));
        return values;
    }

    private static void check(DeviceTensor tensor, DType dtype, int count) {
        if (tensor.dtype() != dtype || tensor.count() != count) {
            throw new IllegalArgumentException(tensor + " is not " + count + " x " + dtype);
        }
    }

    /**
     * Waits for the comms and own streams, then frees what this rank owns. After an abort the
     * memory is left alone (leaked, or handed to {@link #leftoversTo}'s sink): work that a failed
     * peer left behind may still reference it.
     */
    @Override
    public void close() {
        if (comm.isAborted() || comm.isClosed()) {
            dropOwned();
            return;
        }
        RuntimeException failure = null;
        try {
            comm.synchronize();
            for (CudaStream stream : streams) {
                stream.synchronize();
            }
        } catch (RuntimeException e) {
            dropOwned();
            throw e;
        }
        while (!owned.isEmpty()) {
            try {
                owned.pop().close();
            } catch (Exception e) {
                if (failure == null) {
                    failure = e instanceof RuntimeException re ? re : new IllegalStateException(e);
                } else {
                    failure.addSuppressed(e);
                }
            }
        }
        if (failure != null) {
            throw failure;
        }
    }
}
