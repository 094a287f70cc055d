package dev.jnccl.bindings;

import dev.jnccl.bindings.nccl.Nccl;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;

/**
 * Hand-written downcalls of NCCL functions newer than the header the generated bindings were made
 * from: {@code ncclGather} and {@code ncclScatter}, with the signatures of NVIDIA's
 * {@code src/nccl.h.in} at tag v2.28.3-1 (the shapes jextract makes):
 *
 * {@snippet lang=c :
 * ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
 *     ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
 * ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
 *     ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
 * }
 *
 * Each handle is linked on first use, so an older library fails only when the function is called;
 * callers ask {@link NcclFeature#GATHER} / {@link NcclFeature#SCATTER} first. Not API.
 */
public final class NcclRootedCollectives {
    /** Both functions' shape: (sendbuff, recvbuff, count, datatype, root, comm, stream) -> ncclResult_t. */
    private static final FunctionDescriptor ROOTED = FunctionDescriptor.of(Nccl.C_INT, Nccl.C_POINTER,
            Nccl.C_POINTER, Nccl.C_LONG, Nccl.C_INT, Nccl.C_INT, Nccl.C_POINTER, Nccl.C_POINTER);

    private NcclRootedCollectives() {}

    /** Linked on first use only (an NCCL before 2.28 has no such symbol). */
    private static final class Gather {
        static final MethodHandle HANDLE = link("ncclGather");
    }

    /** Linked on first use only (an NCCL before 2.28 has no such symbol). */
    private static final class Scatter {
        static final MethodHandle HANDLE = link("ncclScatter");
    }

    /**
     * {@code ncclGather}: {@code count} elements of every rank's {@code sendbuff} land in the root's
     * {@code recvbuff} at {@code rank * count}; {@code recvbuff} is not used on other ranks.
     *
     * @param sendbuff this rank's elements
     * @param recvbuff the gathered elements (the root's; may be NULL elsewhere)
     * @param count    elements per rank
     * @param datatype the ncclDataType_t
     * @param root     the receiving rank
     * @param comm     the communicator
     * @param stream   the CUDA stream
     * @return the ncclResult_t
     */
    public static int ncclGather(MemorySegment sendbuff, MemorySegment recvbuff, long count, int datatype, int root,
                                 MemorySegment comm, MemorySegment stream) {
        return call(Gather.HANDLE, sendbuff, recvbuff, count, datatype, root, comm, stream);
    }

    /**
     * {@code ncclScatter}: the root's {@code sendbuff} at {@code rank * count} lands in each rank's
     * {@code recvbuff}; {@code sendbuff} is not used on other ranks.
     *
     * @param sendbuff the elements for every rank (the root's; may be NULL elsewhere)
     * @param recvbuff this rank's elements
     * @param count    elements per rank
     * @param datatype the ncclDataType_t
     * @param root     the sending rank
     * @param comm     the communicator
     * @param stream   the CUDA stream
     * @return the ncclResult_t
     */
    public static int ncclScatter(MemorySegment sendbuff, MemorySegment recvbuff, long count, int datatype, int root,
                                  MemorySegment comm, MemorySegment stream) {
        return call(Scatter.HANDLE, sendbuff, recvbuff, count, datatype, root, comm, stream);
    }

    private static MethodHandle link(String name) {
        NativeAccess.check();
        // The generated bindings' lookup: the libraries jnccl loaded (NCCL or the host emulation).
        MemorySegment address = SymbolLookup.loaderLookup().findOrThrow(name);
        return Linker.nativeLinker().downcallHandle(address, ROOTED);
    }

    private static int call(MethodHandle handle, MemorySegment sendbuff, MemorySegment recvbuff, long count,
                            int datatype, int root, MemorySegment comm, MemorySegment stream) {
        try {
            return (int) handle.invokeExact(sendbuff, recvbuff, count, datatype, root, comm, stream);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable e) {
            throw new AssertionError("a downcall threw a checked exception", e);
        }
    }
}
