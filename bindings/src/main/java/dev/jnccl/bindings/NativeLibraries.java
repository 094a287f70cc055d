package dev.jnccl.bindings;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Loads the native libraries behind the generated bindings, once per JVM, before any generated
 * class is touched: the bindings are generated without {@code --library}, so their symbols resolve
 * through this class loader's lookup, and this class alone decides which files are in it.
 *
 * <p>Resolution (for libcudart, then libnccl): the system property ({@value #CUDART_PROPERTY},
 * {@value #NCCL_PROPERTY}) or environment variable ({@value #CUDART_ENVIRONMENT},
 * {@value #NCCL_ENVIRONMENT}) naming a file; else the dynamic linker's names ({@code libcudart.so.13},
 * {@code libcudart.so.12}, {@code libnccl.so.2}); else the NVIDIA wheels of a Python environment. A
 * failure is one {@link NativeLibraryException} that lists every place tried with the loader's error.
 */
public final class NativeLibraries {
    /** The system property naming the libnccl file to load: {@value}. */
    public static final String NCCL_PROPERTY = "jnccl.nccl.library";
    /** The environment variable naming the libnccl file to load: {@value}. */
    public static final String NCCL_ENVIRONMENT = "JNCCL_NCCL_LIBRARY";
    /** The system property naming the libcudart file to load: {@value}. */
    public static final String CUDART_PROPERTY = "jnccl.cudart.library";
    /** The environment variable naming the libcudart file to load: {@value}. */
    public static final String CUDART_ENVIRONMENT = "JNCCL_CUDART_LIBRARY";

    private static final Logger LOG = LoggerFactory.getLogger(NativeLibraries.class);

    static final LibraryResolver.Request CUDART = new LibraryResolver.Request(
            "the CUDA runtime (libcudart)", CUDART_PROPERTY, CUDART_ENVIRONMENT,
            List.of("libcudart.so.13", "libcudart.so.12"),
            List.of("nvidia/cu13/lib", "nvidia/cuda_runtime/lib"),
            List.of("libcudart.so.13", "libcudart.so.12"),
            "Install the CUDA runtime (CUDA 12 or 13), add its lib directory to LD_LIBRARY_PATH, or set -D"
                    + CUDART_PROPERTY + "=/path/to/libcudart.so.13. Without a GPU, use -D" + BackendSetting.PROPERTY
                    + "=host (the host emulation).");
    static final LibraryResolver.Request NCCL = new LibraryResolver.Request(
            "NCCL (libnccl)", NCCL_PROPERTY, NCCL_ENVIRONMENT,
            List.of("libnccl.so.2"),
            List.of("nvidia/nccl/lib"),
            List.of("libnccl.so.2"),
            "Install NCCL " + VersionCodes.major(VersionCodes.NCCL_MINIMUM) + "."
                    + VersionCodes.minor(VersionCodes.NCCL_MINIMUM)
                    + " or newer (e.g. the libnccl2 package or pip's nvidia-nccl-cu13), add its lib directory to"
                    + " LD_LIBRARY_PATH, or set -D" + NCCL_PROPERTY + "=/path/to/libnccl.so.2. Without a GPU, use -D"
                    + BackendSetting.PROPERTY + "=host (the host emulation).");

    /** The one cache of the loaded libraries in the JVM (core reads it through here, keeps no copy). */
    private static volatile LoadedLibraries loaded;

    private NativeLibraries() {}

    /**
     * Loads the libraries of the configured {@link BackendSetting} (once; later calls return the same
     * result) and checks their versions.
     *
     * @return the loaded libraries, their versions and the backend
     * @throws NativeLibraryException when they cannot be found, loaded, or are too old
     */
    public static LoadedLibraries load() {
        LoadedLibraries result = loaded;
        return result != null ? result : loadOnce();
    }

    private static synchronized LoadedLibraries loadOnce() {
        if (loaded != null) {
            return loaded;
        }
        NativeAccess.check(); // first: before this JVM makes any restricted call for jnccl
        BackendSetting requested = BackendSetting.configured();
        LoadedLibraries result = switch (requested) {
            case CUDA -> loadCuda(resolve(CUDART));
            case HOST -> loadHost();
            case AUTO -> loadAuto();
        };
        LOG.info("jnccl native libraries: {}", result.describe());
        loaded = result;
        return result;
    }

    /**
     * The libraries loaded so far, without loading anything.
     *
     * @return the loaded libraries, or null when {@link #load()} has not succeeded yet
     */
    public static LoadedLibraries loadedOrNull() {
        return loaded;
    }

    private static LibraryResolver.Resolved resolve(LibraryResolver.Request request) {
        return LibraryResolver.resolve(request, System::getProperty, System::getenv,
                LibraryResolver.pythonSitePackages(System::getenv));
    }

    private static LoadedLibraries loadAuto() {
        LibraryResolver.Resolved cudart;
        try {
            cudart = resolve(CUDART);
        } catch (NativeLibraryException e) {
            Notices.warn(LOG, BackendSetting.PROPERTY + "=auto: no CUDA runtime found, so jnccl runs on the HOST EMULATION"
                    + " (no GPU). Set " + BackendSetting.PROPERTY + "=cuda to require a GPU. What was tried: " + e.getMessage());
            return loadHost();
        }
        String noDevice = noDeviceReason(cudart.handle());
        if (noDevice == null) {
            return loadCuda(cudart);
        }
        Dl.close(cudart.handle());
        Notices.warn(LOG, BackendSetting.PROPERTY + "=auto: no CUDA device visible (" + noDevice + ", CUDA runtime "
                + cudart.path() + "), so jnccl runs on the HOST EMULATION (no GPU). Set " + BackendSetting.PROPERTY
                + "=cuda to require a GPU.");
        return loadHost();
    }

    /** Null when cudaGetDeviceCount sees a device, else why not. */
    private static String noDeviceReason(Dl.Handle cudart) {
        MemorySegment address = Dl.symbol(cudart, "cudaGetDeviceCount");
        if (address.equals(MemorySegment.NULL)) {
            return "the library has no cudaGetDeviceCount";
        }
        MethodHandle getDeviceCount = Libc.linker().downcallHandle(address, FunctionDescriptor.of(JAVA_INT, ADDRESS));
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment count = arena.allocate(JAVA_INT);
            int status = (int) getDeviceCount.invokeExact(count);
            if (status != 0) {
                return "cudaGetDeviceCount returned CUDA error " + status
                        + (status == 35 ? " (driver missing or too old)" : status == 100 ? " (no device)" : "");
            }
            return count.get(JAVA_INT, 0) > 0 ? null : "cudaGetDeviceCount reports 0 devices";
        } catch (Throwable t) {
            return "cudaGetDeviceCount failed: " + t;
        }
    }

    private static LoadedLibraries loadCuda(LibraryResolver.Resolved cudart) {
        LibraryResolver.Resolved nccl = resolve(NCCL);
        systemLoad(cudart.path(), "the CUDA runtime");
        systemLoad(nccl.path(), "NCCL");
        int ncclVersion = ncclVersion();
        if (ncclVersion < VersionCodes.NCCL_MINIMUM) {
            throw new NativeLibraryException("NCCL " + VersionCodes.text(ncclVersion) + " found at " + nccl.path()
                    + " (" + nccl.origin() + ") is too old: jnccl needs NCCL "
                    + VersionCodes.text(VersionCodes.NCCL_MINIMUM) + " or newer. " + NCCL.hint());
        }
        return new LoadedLibraries(BackendSetting.CUDA, nccl.path(), cudart.path(), ncclVersion, runtimeVersion(),
                driverVersion());
    }

    private static LoadedLibraries loadHost() {
        Path file = HostLibrary.extract();
        try {
            HostLibrary.checkConfiguration(file);
            systemLoad(file, "the host emulation");
        } finally {
            try {
                Files.deleteIfExists(file);
            } catch (IOException e) {
                LOG.debug("could not delete the extracted host emulation {}", file, e);
            }
        }
        Path shown = Path.of("jar:" + HostLibrary.resourceName());
        return new LoadedLibraries(BackendSetting.HOST, shown, shown, ncclVersion(), runtimeVersion(), driverVersion());
    }

    private static void systemLoad(Path file, String what) {
        try {
            System.load(file.toAbsolutePath().toString());
        } catch (IllegalCallerException e) {
            throw NativeAccess.denied(e);
        } catch (UnsatisfiedLinkError e) {
            throw new NativeLibraryException("Could not load " + what + " from " + file + ": " + e.getMessage(), e);
        }
    }

    private static int ncclVersion() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment code = arena.allocate(JAVA_INT);
            int result = Nccl.ncclGetVersion(code);
            if (result != Nccl.ncclSuccess()) {
                throw new NativeLibraryException("ncclGetVersion failed with NCCL result " + result);
            }
            return VersionCodes.fromNccl(code.get(JAVA_INT, 0));
        }
    }

    private static int runtimeVersion() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment code = arena.allocate(JAVA_INT);
            int result = CudaRuntime.cudaRuntimeGetVersion(code);
            return result == CudaRuntime.cudaSuccess() ? VersionCodes.fromCuda(code.get(JAVA_INT, 0)) : 0;
        }
    }

    private static int driverVersion() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment code = arena.allocate(JAVA_INT);
            int result = CudaRuntime.cudaDriverGetVersion(code);
            // 0 means no driver is installed; that is not an error for the runtime.
            return result == CudaRuntime.cudaSuccess() ? VersionCodes.fromCuda(code.get(JAVA_INT, 0)) : 0;
        }
    }
}
