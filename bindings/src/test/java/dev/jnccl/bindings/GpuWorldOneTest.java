package dev.jnccl.bindings;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_FLOAT;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.bindings.nccl.ncclUniqueId;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Random;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * The real libraries on a real GPU, through the raw bindings: a world-1 communicator made from a
 * by-value unique id, an all-reduce of random device data, finalize and destroy. Skipped, with the
 * reason, where no CUDA device is visible.
 */
@Tag("gpu")
class GpuWorldOneTest {

    @Test
    void allReducesRandomDeviceMemoryThroughRealNccl() {
        LoadedLibraries libraries;
        try {
            libraries = NativeLibraries.load();
        } catch (NativeLibraryException e) {
            assumeTrue(false, "no usable CUDA libraries on this machine: " + e.getMessage().lines().findFirst().orElse(""));
            return;
        }
        assumeTrue(libraries.backend() == BackendSetting.CUDA, "backend resolved to " + libraries.backend().id()
                + " (no CUDA device visible); this test needs a GPU and -Djnccl.backend=cuda or auto");
        System.out.println("GPU test libraries: " + libraries.describe());

        int count = (1 << 20) + 3;
        long bytes = count * JAVA_FLOAT.byteSize();
        try (Arena arena = Arena.ofConfined()) {
            check(CudaRuntime.cudaSetDevice(0), "cudaSetDevice");
            MemorySegment host = arena.allocate(JAVA_FLOAT, count);
            Random random = new Random(20261202L);
            for (int i = 0; i < count; i++) {
                host.setAtIndex(JAVA_FLOAT, i, random.nextFloat() * 2 - 1);
            }
            MemorySegment out = arena.allocate(ADDRESS);
            check(CudaRuntime.cudaMalloc(out, bytes), "cudaMalloc");
            MemorySegment send = out.get(ADDRESS, 0);
            check(CudaRuntime.cudaMalloc(out, bytes), "cudaMalloc");
            MemorySegment recv = out.get(ADDRESS, 0);
            check(CudaRuntime.cudaMemcpy(send, host, bytes, CudaRuntime.cudaMemcpyHostToDevice()), "cudaMemcpy H2D");
            check(CudaRuntime.cudaStreamCreateWithFlags(out, CudaRuntime.cudaStreamNonBlocking()), "cudaStreamCreate");
            MemorySegment stream = out.get(ADDRESS, 0);

            MemorySegment id = ncclUniqueId.allocate(arena);
            checkNccl(Nccl.ncclGetUniqueId(id), "ncclGetUniqueId");
            assertNotEquals(-1L, id.mismatch(arena.allocate(128)), "ncclGetUniqueId left the id all zero");
            checkNccl(Nccl.ncclCommInitRank(out, 1, id, 0), "ncclCommInitRank");
            MemorySegment comm = out.get(ADDRESS, 0);

            MemorySegment value = arena.allocate(JAVA_INT);
            checkNccl(Nccl.ncclCommCount(comm, value), "ncclCommCount");
            assertEquals(1, value.get(JAVA_INT, 0));
            checkNccl(Nccl.ncclCommUserRank(comm, value), "ncclCommUserRank");
            assertEquals(0, value.get(JAVA_INT, 0));
            checkNccl(Nccl.ncclCommCuDevice(comm, value), "ncclCommCuDevice");
            assertEquals(0, value.get(JAVA_INT, 0));

            checkNccl(Nccl.ncclAllReduce(send, recv, count, Nccl.ncclFloat32(), Nccl.ncclSum(), comm, stream),
                    "ncclAllReduce");
            check(CudaRuntime.cudaStreamSynchronize(stream), "cudaStreamSynchronize");
            MemorySegment result = arena.allocate(JAVA_FLOAT, count);
            check(CudaRuntime.cudaMemcpy(result, recv, bytes, CudaRuntime.cudaMemcpyDeviceToHost()), "cudaMemcpy D2H");
            for (int i = 0; i < count; i++) {
                // World 1: the sum over one rank is the input, bit for bit.
                assertEquals(Float.floatToRawIntBits(host.getAtIndex(JAVA_FLOAT, i)),
                        Float.floatToRawIntBits(result.getAtIndex(JAVA_FLOAT, i)), "element " + i);
            }

            checkNccl(Nccl.ncclCommFinalize(comm), "ncclCommFinalize");
            checkNccl(Nccl.ncclCommDestroy(comm), "ncclCommDestroy");
            check(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
            check(CudaRuntime.cudaFree(send), "cudaFree");
            check(CudaRuntime.cudaFree(recv), "cudaFree");
        }
    }

    private static void check(int cudaError, String call) {
        assertEquals(0, cudaError, () -> call + " failed: " + CudaRuntime.cudaGetErrorString(cudaError).reinterpret(Integer.MAX_VALUE).getString(0));
    }

    private static void checkNccl(int result, String call) {
        assertEquals(0, result, () -> call + " failed: " + Nccl.ncclGetErrorString(result).reinterpret(Integer.MAX_VALUE).getString(0));
    }
}
