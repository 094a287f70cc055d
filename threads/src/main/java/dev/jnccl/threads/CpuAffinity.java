package dev.jnccl.threads;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import dev.jnccl.bindings.cuda.CudaRuntime;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Pins the calling thread to the CPUs local to a GPU through NVML, when libnvidia-ml is there. The
 * GPU is found by its PCI bus id, so CUDA_VISIBLE_DEVICES renumbering cannot make a rank pin to
 * another GPU's CPUs (the C++ original pinned every thread to GPU 0's).
 */
final class CpuAffinity {
    private static final Logger LOG = LoggerFactory.getLogger(CpuAffinity.class);
    private static final Nvml NVML = Nvml.load();

    private CpuAffinity() {}

    /** The NVML functions used, or why they are unavailable. */
    private record Nvml(MethodHandle handleByPciBusId, MethodHandle setCpuAffinity, String unavailable) {
        static Nvml load() {
            try {
                SymbolLookup lookup = SymbolLookup.libraryLookup("libnvidia-ml.so.1", Arena.global());
                Linker linker = Linker.nativeLinker();
                MethodHandle init = linker.downcallHandle(lookup.findOrThrow("nvmlInit_v2"), FunctionDescriptor.of(JAVA_INT));
                int status = (int) init.invokeExact();
                if (status != 0) {
                    return new Nvml(null, null, "nvmlInit_v2 returned " + status);
                }
                return new Nvml(
                        linker.downcallHandle(lookup.findOrThrow("nvmlDeviceGetHandleByPciBusId_v2"),
                                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS)),
                        linker.downcallHandle(lookup.findOrThrow("nvmlDeviceSetCpuAffinity"),
                                FunctionDescriptor.of(JAVA_INT, ADDRESS)),
                        null);
            } catch (Throwable t) {
                return new Nvml(null, null, "libnvidia-ml.so.1 not usable: " + t.getMessage());
            }
        }
    }

    /**
     * Pins the calling thread to {@code device}'s local CPUs; returns a line saying what was done
     * (it names the device and its PCI bus id). Never throws: affinity is an optimisation.
     */
    static String pin(int rank, int device, boolean realGpu) {
        String busId;
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buffer = arena.allocate(64);
            int status = CudaRuntime.cudaDeviceGetPCIBusId(buffer, 64, device);
            if (status != 0) {
                return "no CPU pinning: cudaDeviceGetPCIBusId(" + device + ") returned " + status;
            }
            busId = buffer.getString(0);
        }
        String gpu = "GPU " + device + " (PCI " + busId + ")";
        if (!realGpu) {
            return "no CPU pinning for " + gpu + ": host emulation";
        }
        if (NVML.unavailable() != null) {
            LOG.debug("rank {}: no CPU pinning for {}: {}", rank, gpu, NVML.unavailable());
            return "no CPU pinning for " + gpu + ": " + NVML.unavailable();
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment handle = arena.allocate(ADDRESS);
            int status = (int) NVML.handleByPciBusId().invokeExact(arena.allocateFrom(busId), handle);
            if (status != 0) {
                return "no CPU pinning for " + gpu + ": nvmlDeviceGetHandleByPciBusId_v2 returned " + status;
            }
            status = (int) NVML.setCpuAffinity().invokeExact(handle.get(ADDRESS, 0));
            String message = status == 0 ? "pinned to the CPUs local to " + gpu
                    : "no CPU pinning for " + gpu + ": nvmlDeviceSetCpuAffinity returned " + status;
            LOG.info("rank {}: {}", rank, message);
            return message;
        } catch (Throwable t) {
            LOG.debug("rank {}: CPU pinning failed", rank, t);
            return "no CPU pinning for " + gpu + ": " + t;
        }
    }
}
