package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.Backend;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import dev.jnccl.threads.ThreadsPack;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Each rank's thread is pinned for ITS GPU, found by that GPU's PCI bus id (the C++ original
 * pinned every thread to GPU 0's CPUs).
 */
class ThreadsAffinityTest {

    private static String busId(int device) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buffer = arena.allocate(64);
            assertEquals(0, CudaRuntime.cudaDeviceGetPCIBusId(buffer, 64, device));
            return buffer.getString(0);
        }
    }

    @Test
    void everyRankLooksUpItsOwnGpu() {
        Packs.assumeHost("four ranks need four devices");
        int world = 4;
        List<String> reports;
        try (ThreadsPack pack = ThreadsCommunicators.launch(world, ThreadsOptions.defaults().withPinCpus(true),
                comm -> comm.barrier())) {
            pack.join();
            reports = pack.affinityReports();
        }
        for (int rank = 0; rank < world; rank++) {
            String expected = "GPU " + rank + " (PCI " + busId(rank) + ")";
            assertTrue(reports.get(rank).contains(expected), "rank " + rank + ": " + reports.get(rank));
        }
        assertEquals(world, reports.stream().distinct().count(), "two ranks pinned for the same GPU: " + reports);
    }

    @Test
    @Tag("gpu")
    void rankZeroIsPinnedToItsGpusCpusOnARealGpu() throws Exception {
        assumeTrue(Packs.backend() == Backend.CUDA, "needs a real GPU with NVML (backend is " + Packs.backend() + ")");
        Map<Integer, String> allowed = new ConcurrentHashMap<>();
        List<String> reports;
        try (ThreadsPack pack = ThreadsCommunicators.launch(1, ThreadsOptions.defaults().withPinCpus(true), comm -> {
            try {
                allowed.put(comm.rank(), Files.readAllLines(Path.of("/proc/thread-self/status")).stream()
                        .filter(l -> l.startsWith("Cpus_allowed_list")).findFirst().orElse("?"));
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        })) {
            pack.join();
            reports = pack.affinityReports();
        }
        System.out.println("rank 0 affinity: " + reports.getFirst() + "; " + allowed.get(0));
        assertTrue(reports.getFirst().startsWith("pinned to the CPUs local to GPU 0 (PCI " + busId(0) + ")"),
                reports.getFirst());
    }
}
