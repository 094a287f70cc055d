package dev.jnccl;

import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.spi.Command.Kind;
import dev.jnccl.spi.Command.RootOnly;
import dev.jnccl.spi.Command.Shape;

/**
 * The argument checks of one rank's {@link Communicator} and its transactions, made before any
 * native call: each exception names the operation and the values.
 */
final class Checks {
    private final int rank;
    private final int worldSize;
    private final int device;
    private final LoadedLibraries libraries;

    /**
     * Checks the communicator's own rank, world size and device (the last needs the native
     * libraries, loaded here).
     */
    Checks(int rank, int worldSize, int device) {
        if (worldSize < 1) {
            throw new IllegalArgumentException("Communicator: world size " + worldSize + " must be at least 1");
        }
        if (rank < 0 || rank >= worldSize) {
            throw new IllegalArgumentException("Communicator: rank " + rank + " out of range [0, " + worldSize + ")");
        }
        this.libraries = NcclCalls.libraries();
        int devices = Cuda.deviceCount();
        if (device < 0 || device >= devices) {
            throw new IllegalArgumentException("Communicator: device " + device + " out of range [0, " + devices
                    + ") on rank " + rank);
        }
        this.rank = rank;
        this.worldSize = worldSize;
        this.device = device;
    }

    LoadedLibraries libraries() {
        return libraries;
    }

    void checkPeer(String operation, int peer) {
        if (peer < 0 || peer >= worldSize) {
            throw new IllegalArgumentException(operation + ": peer " + peer + " out of range [0, " + worldSize + ")");
        }
    }

    void checkRoot(String operation, int root) {
        if (root < 0 || root >= worldSize) {
            throw new IllegalArgumentException(operation + ": root " + root + " out of range [0, " + worldSize + ")");
        }
    }

    void checkSupported(String operation, DType dtype) {
        NcclFeature feature = NcclTypes.requiredFeature(dtype);
        if (feature != null && !libraries.supports(feature)) {
            throw new IllegalArgumentException(operation + ": " + dtype + " needs NCCL "
                    + LibraryVersion.of(feature.sinceVersion()) + " or newer; this is NCCL "
                    + LibraryVersion.of(libraries.ncclVersion()));
        }
    }

    void checkReducible(String operation, DType dtype, ReduceOp op) {
        if (!dtype.isReducible()) {
            throw new IllegalArgumentException(operation + ": " + dtype + " tensors cannot be reduced (" + op
                    + "); use a numeric type");
        }
        checkSupported(operation, dtype);
        checkScaledSum(operation, dtype, op);
    }

    /** A pre-multiplied sum: the loaded NCCL has it, and its factor fits the tensor's type. */
    private void checkScaledSum(String operation, DType dtype, ReduceOp op) {
        if (op.kind() != ReduceOp.Kind.SCALED_SUM) {
            return;
        }
        NcclFeature feature = NcclFeature.PRE_MUL_SUM;
        if (!libraries.supports(feature) || !feature.isLinked()) {
            throw new IllegalArgumentException(operation + ": " + op + " needs NCCL "
                    + LibraryVersion.of(feature.sinceVersion()) + " or newer (ncclRedOpCreatePreMulSum); this is NCCL "
                    + LibraryVersion.of(libraries.ncclVersion()));
        }
        if (worldSize == 1 && (dtype == DType.FP8_E4M3 || dtype == DType.FP8_E5M2)) {
            // NCCL 2.28's single-rank path (src/device/onerank.cu) has no FP8 kernel: it answers ncclInvalidArgument.
            throw new IllegalArgumentException(operation + ": " + op + " on " + dtype + " tensors needs at least 2"
                    + " ranks (NCCL has no single-rank pre-multiplied sum for FP8 types)");
        }
        String problem = NcclTypes.scalarProblem(dtype, op.factor());
        if (problem != null) {
            throw new IllegalArgumentException(operation + ": scaledSum factor " + op.factor() + " cannot scale "
                    + dtype + " tensors: " + problem);
        }
    }

    void requireStream(String operation, CudaStream stream) {
        if (stream == null) { // not requireNonNull(stream, message): the message would be built on every call
            throw new NullPointerException(operation + ": stream is null");
        }
        if (stream.isClosed()) {
            throw new IllegalStateException(operation + ": stream " + stream + " is closed");
        }
        if (stream.device() != device) {
            throw new IllegalArgumentException(operation + ": stream is on device " + stream.device()
                    + ", the communicator of rank " + rank + " on device " + device);
        }
    }

    // ---------------------------------------------------------------- tensors

    /**
     * Checks that {@code tensor} is given and its memory, when known, is open: a freed buffer gives
     * an exception naming the operation and the argument instead of a CUDA error or corrupted memory.
     * Allocates nothing unless it throws.
     *
     * @throws NullPointerException  when {@code tensor} is null
     * @throws IllegalStateException when its memory was closed
     */
    static void requireOpen(String operation, String argument, DeviceTensor tensor) {
        if (tensor == null) {
            throw new NullPointerException(operation + ": " + argument + " is null");
        }
        DeviceMemory memory = tensor.memory();
        if (memory != null && memory.isClosed()) {
            throw new IllegalStateException(operation + ": " + argument + " " + tensor + " views " + memory
                    + (memory.isOwned() ? ", which was closed: its memory was freed"
                            : ", which was closed: jnccl no longer uses the wrapped pointer"));
        }
    }

    /** {@link #requireOpen}, and on this rank's device when the tensor knows its device (a raw address passes). */
    void requireUsable(String operation, String argument, DeviceTensor tensor) {
        requireOpen(operation, argument, tensor);
        int actual = tensor.device();
        if (actual != -1 && actual != device) {
            throw new IllegalArgumentException(operation + ": " + argument + " is on device " + actual
                    + " but the communicator of rank " + rank + " is on device " + device);
        }
    }

    // ---------------------------------------------------------------- commands

    /**
     * Checks a command's arguments before anything native happens, from its kind's row: the
     * buffers (given, open, on this device; null allowed off the root where only the root uses
     * one), the op, the root or peer, the data types, the counts of the kind's shape, what the
     * loaded NCCL supports, and that the buffers are in place or apart.
     *
     * @param kind   the collective
     * @param single whether the caller passed one tensor (named "tensor"; in place)
     * @return whether both buffers are there (false off the root for a root-only buffer)
     */
    boolean command(Kind kind, boolean single, DeviceTensor src, DeviceTensor dst, ReduceOp op, int target) {
        String operation = kind.method();
        String srcName = single ? "tensor" : kind.srcName();
        String dstName = single ? "tensor" : kind.dstName();
        if (kind.rootOnly() != RootOnly.SRC) {
            requireUsable(operation, srcName, src);
        }
        if (!single && kind.rootOnly() != RootOnly.DST) {
            requireUsable(operation, dstName, dst);
        }
        if (kind.reduces() && op == null) {
            throw new NullPointerException(operation + ": op is null");
        }
        switch (kind.role()) {
            case ROOT -> checkRoot(operation, target);
            case PEER -> checkPeer(operation, target);
            case NONE -> { }
        }
        boolean both = single || (kind.rootOnly() == RootOnly.SRC ? rootBuffer(operation, srcName, src, target)
                : kind.rootOnly() != RootOnly.DST || rootBuffer(operation, dstName, dst, target));
        DType dtype = (src != null ? src : dst).dtype();
        if (single) {
            requireDivisible(kind, src);
        } else if (both) {
            shape(kind, srcName, src, dstName, dst, kind.rootOnly() == RootOnly.NONE || target == rank);
        }
        if (kind.reduces()) {
            checkReducible(operation, dtype, op);
        } else {
            checkSupported(operation, dtype);
        }
        return both;
    }

    /** The world-size slots of a one-tensor command: a whole number of elements per rank. */
    private void requireDivisible(Kind kind, DeviceTensor tensor) {
        Shape shape = kind.shape();
        if ((shape == Shape.SCATTERED || kind == Kind.DESTRUCTIVE_ALL_TO_ALL) && tensor.count() % worldSize != 0) {
            throw new IllegalArgumentException(kind.method() + ": " + tensor.count()
                    + " elements not divisible by world size " + worldSize);
        }
    }

    /** A root-only buffer: checked where given, refused when the root gives none; {@return whether given} */
    private boolean rootBuffer(String operation, String argument, DeviceTensor tensor, int root) {
        if (tensor == null) {
            if (root == rank) {
                throw new IllegalArgumentException(operation + ": " + argument + " is null on the root rank " + root
                        + "; only ranks other than the root may pass null");
            }
            return false;
        }
        requireUsable(operation, argument, tensor);
        return true;
    }

    /** The two buffers of an even kind: one type, the counts of its shape, in place or apart. */
    private void shape(Kind kind, String srcName, DeviceTensor src, String dstName, DeviceTensor dst,
                       boolean used) {
        String operation = kind.method();
        if (src.dtype() != dst.dtype()) {
            throw new IllegalArgumentException(operation + ": " + srcName + " dtype " + src.dtype() + " differs from "
                    + dstName + " dtype " + dst.dtype());
        }
        switch (kind.shape()) {
            case SAME -> {
                requireCount(operation, dstName, dst, src.count(), srcName);
                apart(used, operation, srcName, src, dstName, dst, dst.address() == src.address(), true, " equal to ");
            }
            case SCATTERED -> {
                requireWorldTimes(operation, srcName, src, dstName, dst);
                apart(used, operation, srcName, src, dstName, dst, dst.address() == src.address() + rank * dst.bytes(),
                        true, " this rank's slot of ");
            }
            case GATHERED -> {
                requireWorldTimes(operation, dstName, dst, srcName, src);
                apart(used, operation, srcName, src, dstName, dst, src.address() == dst.address() + rank * src.bytes(),
                        false, " this rank's slot of ");
            }
            case EXCHANGED -> exchanged(operation, src, dst);
            case ONE, COUNTED, BLOCKS -> { }
        }
    }

    /** All-to-all's buffers: one count, a whole number per rank, apart. */
    private void exchanged(String operation, DeviceTensor send, DeviceTensor recv) {
        if (send.count() != recv.count()) {
            throw new IllegalArgumentException(operation + ": send has " + send.count() + " elements but recv has "
                    + recv.count());
        }
        if (send.count() % worldSize != 0) {
            throw new IllegalArgumentException(operation + ": " + send.count() + " elements not divisible by world size "
                    + worldSize);
        }
        if (overlap(send, recv)) {
            throw new IllegalArgumentException(operation + ": send " + send + " and recv " + recv
                    + " overlap; use destructiveAllToAll for an in-place exchange");
        }
    }

    /**
     * Checks the counts of a kind with counts, given as scratch copies (another thread may change
     * the caller's arrays meanwhile): per-peer blocks to send and receive ({@link Shape#COUNTED}), or
     * one block per rank of which this rank's is its whole source ({@link Shape#BLOCKS}).
     *
     * @param sends the send counts, or null for {@link Shape#BLOCKS}
     */
    void counted(Kind kind, DeviceTensor src, long[] sends, DeviceTensor dst, long[] recvs) {
        String operation = kind.method();
        String srcName = kind.srcName();
        String dstName = kind.dstName();
        if (src.dtype() != dst.dtype()) {
            throw new IllegalArgumentException(operation + ": " + srcName + " dtype " + src.dtype() + " differs from "
                    + dstName + " dtype " + dst.dtype());
        }
        if (sends != null) {
            requireCounts(operation, "sendCounts", sends, srcName, src);
        }
        requireCounts(operation, sends == null ? "counts" : "recvCounts", recvs, dstName, dst);
        if (sends != null) {
            if (sends[rank] != recvs[rank]) {
                throw new IllegalArgumentException(operation + ": sendCounts[" + rank + "] = " + sends[rank]
                        + " (to this rank itself) must equal recvCounts[" + rank + "] = " + recvs[rank]);
            }
            if (overlap(src, dst)) {
                throw new IllegalArgumentException(operation + ": " + srcName + " " + src + " and " + dstName + " "
                        + dst + " overlap");
            }
            return;
        }
        if (recvs[rank] != src.count()) {
            throw new IllegalArgumentException(operation + ": counts[" + rank + "] = " + recvs[rank]
                    + " (this rank's block) must equal " + srcName + "'s " + src.count() + " elements");
        }
        long before = 0;
        for (int q = 0; q < rank; q++) {
            before += recvs[q];
        }
        apart(true, operation, srcName, src, dstName, dst, src.address() == dst.address() + before * dst.dtype().size(),
                false, " this rank's block of ");
    }

    /** Each count in range and their running sum within the tensor. */
    private static void requireCounts(String operation, String argument, long[] counts, String tensorName,
                                      DeviceTensor tensor) {
        long sum = 0;
        for (int q = 0; q < counts.length; q++) {
            if (counts[q] < 0) {
                throw new IllegalArgumentException(operation + ": " + argument + "[" + q + "] = " + counts[q]
                        + " out of range [0, " + tensor.count() + "]");
            }
            if (counts[q] > tensor.count() - sum) {
                throw new IllegalArgumentException(operation + ": " + argument + " up to [" + q + "] sum past "
                        + tensorName + "'s " + tensor.count() + " elements (" + argument + "[" + q + "] = " + counts[q]
                        + " after " + sum + "; allowed [0, " + (tensor.count() - sum) + "])");
            }
            sum += counts[q];
        }
    }

    /**
     * {@return a world-size copy of {@code counts}} after checking its length: scratch array
     * {@code which} of {@code buffer}, so that a call allocates nothing.
     */
    long[] countsCopy(String operation, String argument, long[] counts, CommandBuffer buffer, int which) {
        if (counts == null) {
            throw new NullPointerException(operation + ": " + argument + " is null");
        }
        if (counts.length != worldSize) {
            throw new IllegalArgumentException(operation + ": " + argument + " has " + counts.length
                    + " entries, expected world size " + worldSize);
        }
        long[] copy = buffer.countsScratch(which, worldSize);
        System.arraycopy(counts, 0, copy, 0, worldSize);
        return copy;
    }

    private static void requireCount(String operation, String argument, DeviceTensor tensor, long expected,
                                     String expectedName) {
        if (tensor.count() != expected) {
            throw new IllegalArgumentException(operation + ": " + argument + " has " + tensor.count()
                    + " elements, expected " + expectedName + "'s count " + expected);
        }
    }

    private void requireWorldTimes(String operation, String wholeName, DeviceTensor whole, String partName,
                                   DeviceTensor part) {
        if (part.count() > Long.MAX_VALUE / worldSize || whole.count() != part.count() * worldSize) {
            throw new IllegalArgumentException(operation + ": " + wholeName + " has " + whole.count()
                    + " elements, expected " + partName + " " + part.count() + " x world size " + worldSize
                    + (part.count() > Long.MAX_VALUE / worldSize ? "" : " = " + part.count() * worldSize));
        }
    }

    /**
     * Refuses buffers that overlap without being in place ({@code inPlace}: the kind's in-place rule
     * holds), where they are {@code used} (a root-only buffer is not, off the root). The rule reads
     * "dst this rank's slot of src" ({@code dstIsPart}) or "src this rank's slot of dst", made only
     * when refused: the hot path builds no text.
     */
    private static void apart(boolean used, String operation, String srcName, DeviceTensor src, String dstName,
                              DeviceTensor dst, boolean inPlace, boolean dstIsPart, String relation) {
        if (used && !inPlace && overlap(src, dst)) {
            String rule = dstIsPart ? dstName + relation + srcName : srcName + relation + dstName;
            throw new IllegalArgumentException(operation + ": " + srcName + " " + src + " and " + dstName + " " + dst
                    + " overlap but are not in place (in place needs " + rule + "; otherwise they must not overlap)");
        }
    }

    static boolean overlap(DeviceTensor a, DeviceTensor b) {
        return a.bytes() > 0 && b.bytes() > 0 && a.address() < b.address() + b.bytes()
                && b.address() < a.address() + a.bytes();
    }
}
