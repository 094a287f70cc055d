package dev.jnccl;

import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaStream;

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
}
