package dev.jnccl;

import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaException;
import java.util.Objects;

/**
 * What jnccl runs on in this JVM, without creating a communicator: the {@link Backend} chosen at
 * load time, the NCCL and CUDA versions, and how many devices are visible. For example, to size a
 * job or log the setup:
 *
 * <pre>{@code
 * JncclRuntime runtime = JncclRuntime.query();
 * if (runtime.backend() == Backend.HOST) { ... }   // no GPU: the host emulation
 * int gpus = runtime.deviceCount();
 * }</pre>
 *
 * @param backend     the real CUDA libraries or the host emulation
 * @param nccl        the loaded NCCL's version (ncclGetVersion)
 * @param cudaRuntime the loaded CUDA runtime's version (cudaRuntimeGetVersion; patch is 0)
 * @param cudaDriver  the CUDA driver's version (cudaDriverGetVersion; 0.0.0 when no driver is installed)
 * @param deviceCount the CUDA devices visible to this process (0 when none; the host emulation's
 *                    virtual devices, {@code JNCCL_HOST_DEVICES}, default 8)
 */
public record JncclRuntime(Backend backend, LibraryVersion nccl, LibraryVersion cudaRuntime,
                           LibraryVersion cudaDriver, int deviceCount) {

    /**
     * Checks the components.
     *
     * @throws NullPointerException     for a null component
     * @throws IllegalArgumentException for a negative device count
     */
    public JncclRuntime {
        Objects.requireNonNull(backend, "JncclRuntime: backend is null");
        Objects.requireNonNull(nccl, "JncclRuntime: nccl is null");
        Objects.requireNonNull(cudaRuntime, "JncclRuntime: cudaRuntime is null");
        Objects.requireNonNull(cudaDriver, "JncclRuntime: cudaDriver is null");
        if (deviceCount < 0) {
            throw new IllegalArgumentException("JncclRuntime: deviceCount " + deviceCount + " is negative");
        }
    }

    /**
     * Loads the native libraries if this JVM has not yet (as the first communicator would) and
     * reports what they are. Versions are fixed for the JVM's life; the device count is asked anew.
     *
     * @return the backend, library versions and visible device count
     * @throws NativeLibraryException when the libraries cannot be loaded (the message says what was tried)
     */
    public static JncclRuntime query() {
        LoadedLibraries libraries = NcclCalls.libraries();
        return new JncclRuntime(backendOf(libraries), LibraryVersion.of(libraries.ncclVersion()),
                LibraryVersion.of(libraries.cudaRuntimeVersion()), LibraryVersion.of(libraries.cudaDriverVersion()),
                visibleDevices());
    }

    /**
     * Whether the loaded NCCL has {@code dtype}: {@link DType#BF16} needs NCCL 2.10, the FP8 types
     * 2.24; the others are in every NCCL jnccl accepts. (The hardware may still refuse: FP8
     * reductions also need an sm_90 or newer GPU, which NCCL checks.)
     *
     * @param dtype the data type
     * @return whether the loaded NCCL can move and reduce {@code dtype}
     */
    public boolean supports(DType dtype) {
        Objects.requireNonNull(dtype, "supports: dtype is null");
        NcclFeature feature = NcclTypes.requiredFeature(dtype);
        return feature == null || nccl.compareTo(LibraryVersion.of(feature.sinceVersion())) >= 0;
    }

    /** The backend the loader's {@code jnccl.backend} setting resolved to (never AUTO: the loader has decided by then). */
    static Backend backendOf(LoadedLibraries libraries) {
        return switch (libraries.backend()) {
            case CUDA -> Backend.CUDA;
            case HOST -> Backend.HOST;
            case AUTO -> throw new IllegalStateException("the native loader left the backend unresolved (auto)");
        };
    }

    /** cudaGetDeviceCount ({@link Cuda#deviceCount()}), where "no device" is the answer 0 rather than an error. */
    private static int visibleDevices() {
        try {
            return Cuda.deviceCount();
        } catch (CudaException e) {
            if (e.code() != CudaRuntime.cudaErrorNoDevice()) {
                throw e;
            }
            CudaRuntime.cudaGetLastError(); // the runtime also keeps it as the thread's last error
            return 0;
        }
    }
}
