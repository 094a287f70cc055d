package dev.jnccl.bindings;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;

/**
 * Hand-written downcalls of NCCL's collectives and point-to-point calls that take the device
 * buffers as raw addresses ({@code long}) instead of {@link MemorySegment}s, for the hot path: a
 * segment made per call is an object that only the JIT's escape analysis removes, and whether it
 * does depends on how deep the caller's compiled code inlines (seen: 40 bytes per buffer per call
 * when it does not). A {@code void*} and a 64-bit integer are passed alike by the C calling
 * conventions of the 64-bit platforms jnccl runs on (x86-64 System V, AArch64), so NCCL receives
 * the same arguments. Shapes as NVIDIA's {@code src/nccl.h.in} at tag v2.28.3-1; the communicator
 * and stream stay segments (made once per communicator and stream). {@code ncclAlltoAll},
 * {@code ncclGather} and {@code ncclScatter} (NCCL 2.28+) are linked on first use, so an older
 * library fails only when they are called; callers ask {@link NcclFeature} first. Not API.
 */
public final class NcclBufferCalls {
    /** (sendbuff, recvbuff, count, datatype, op | root, comm, stream): all-reduce, reduce-scatter, broadcast, gather, scatter. */
    private static final FunctionDescriptor TWO_BUFFERS_AND_INT = FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG,
            JAVA_LONG, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS);
    /** (sendbuff, recvbuff, count, datatype, comm, stream): all-gather, all-to-all. */
    private static final FunctionDescriptor TWO_BUFFERS = FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG,
            JAVA_LONG, JAVA_INT, ADDRESS, ADDRESS);
    /** (sendbuff, recvbuff, count, datatype, op, root, comm, stream): reduce. */
    private static final FunctionDescriptor REDUCE = FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG,
            JAVA_INT, JAVA_INT, JAVA_INT, ADDRESS, ADDRESS);
    /** (buff, count, datatype, peer, comm, stream): send, recv. */
    private static final FunctionDescriptor ONE_BUFFER = FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_INT,
            JAVA_INT, ADDRESS, ADDRESS);

    private NcclBufferCalls() {}

    private static final class AllReduce {
        static final MethodHandle HANDLE = link("ncclAllReduce", TWO_BUFFERS_AND_INT);
    }

    private static final class ReduceScatter {
        static final MethodHandle HANDLE = link("ncclReduceScatter", TWO_BUFFERS_AND_INT);
    }

    private static final class AllGather {
        static final MethodHandle HANDLE = link("ncclAllGather", TWO_BUFFERS);
    }

    private static final class Broadcast {
        static final MethodHandle HANDLE = link("ncclBroadcast", TWO_BUFFERS_AND_INT);
    }

    private static final class Reduce {
        static final MethodHandle HANDLE = link("ncclReduce", REDUCE);
    }

    private static final class Send {
        static final MethodHandle HANDLE = link("ncclSend", ONE_BUFFER);
    }

    private static final class Recv {
        static final MethodHandle HANDLE = link("ncclRecv", ONE_BUFFER);
    }

    /** Linked on first use only (an NCCL before 2.28 has no such symbol). */
    private static final class AlltoAll {
        static final MethodHandle HANDLE = link("ncclAlltoAll", TWO_BUFFERS);
    }

    /** Linked on first use only (an NCCL before 2.28 has no such symbol). */
    private static final class Gather {
        static final MethodHandle HANDLE = link("ncclGather", TWO_BUFFERS_AND_INT);
    }

    /** Linked on first use only (an NCCL before 2.28 has no such symbol). */
    private static final class Scatter {
        static final MethodHandle HANDLE = link("ncclScatter", TWO_BUFFERS_AND_INT);
    }

    /**
     * {@code ncclAllReduce}.
     *
     * @param sendbuff the send buffer's address
     * @param recvbuff the receive buffer's address (the same: in place)
     * @param count    elements
     * @param datatype the ncclDataType_t
     * @param op       the ncclRedOp_t
     * @param comm     the communicator
     * @param stream   the CUDA stream
     * @return the ncclResult_t
     */
    public static int ncclAllReduce(long sendbuff, long recvbuff, long count, int datatype, int op,
                                    MemorySegment comm, MemorySegment stream) {
        return call(AllReduce.HANDLE, sendbuff, recvbuff, count, datatype, op, comm, stream);
    }

    /**
     * {@code ncclReduceScatter}.
     *
     * @param sendbuff  the send buffer's address (world size times {@code recvcount} elements)
     * @param recvbuff  the receive buffer's address
     * @param recvcount elements each rank receives
     * @param datatype  the ncclDataType_t
     * @param op        the ncclRedOp_t
     * @param comm      the communicator
     * @param stream    the CUDA stream
     * @return the ncclResult_t
     */
    public static int ncclReduceScatter(long sendbuff, long recvbuff, long recvcount, int datatype, int op,
                                        MemorySegment comm, MemorySegment stream) {
        return call(ReduceScatter.HANDLE, sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
    }

    /**
     * {@code ncclAllGather}.
     *
     * @param sendbuff  the send buffer's address
     * @param recvbuff  the receive buffer's address (world size times {@code sendcount} elements)
     * @param sendcount elements each rank sends
     * @param datatype  the ncclDataType_t
     * @param comm      the communicator
     * @param stream    the CUDA stream
     * @return the ncclResult_t
     */
    public static int ncclAllGather(long sendbuff, long recvbuff, long sendcount, int datatype, MemorySegment comm,
                                    MemorySegment stream) {
        return call(AllGather.HANDLE, sendbuff, recvbuff, sendcount, datatype, comm, stream);
    }

    /**
     * {@code ncclBroadcast}.
     *
     * @param sendbuff the send buffer's address (read on the root)
     * @param recvbuff the receive buffer's address
     * @param count    elements
     * @param datatype the ncclDataType_t
     * @param root     the sending rank
     * @param comm     the communicator
     * @param stream   the CUDA stream
     * @return the ncclResult_t
     */
    public static int ncclBroadcast(long sendbuff, long recvbuff, long count, int datatype, int root,
                                    MemorySegment comm, MemorySegment stream) {
        return call(Broadcast.HANDLE, sendbuff, recvbuff, count, datatype, root, comm, stream);
    }

    /**
     * {@code ncclReduce}.
     *
     * @param sendbuff the send buffer's address
     * @param recvbuff the receive buffer's address (the root's; 0 elsewhere)
     * @param count    elements
     * @param datatype the ncclDataType_t
     * @param op       the ncclRedOp_t
     * @param root     the receiving rank
     * @param comm     the communicator
     * @param stream   the CUDA stream
     * @return the ncclResult_t
     */
    public static int ncclReduce(long sendbuff, long recvbuff, long count, int datatype, int op, int root,
                                 MemorySegment comm, MemorySegment stream) {
        try {
            return (int) Reduce.HANDLE.invokeExact(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable e) {
            throw new AssertionError("a downcall threw a checked exception", e);
        }
    }

    /**
     * {@code ncclSend}.
     *
     * @param sendbuff the buffer's address
     * @param count    elements
     * @param datatype the ncclDataType_t
     * @param peer     the receiving rank
     * @param comm     the communicator
     * @param stream   the CUDA stream
     * @return the ncclResult_t
     */
    public static int ncclSend(long sendbuff, long count, int datatype, int peer, MemorySegment comm,
                               MemorySegment stream) {
        return call(Send.HANDLE, sendbuff, count, datatype, peer, comm, stream);
    }

    /**
     * {@code ncclRecv}.
     *
     * @param recvbuff the buffer's address
     * @param count    elements
     * @param datatype the ncclDataType_t
     * @param peer     the sending rank
     * @param comm     the communicator
     * @param stream   the CUDA stream
     * @return the ncclResult_t
     */
    public static int ncclRecv(long recvbuff, long count, int datatype, int peer, MemorySegment comm,
                               MemorySegment stream) {
        return call(Recv.HANDLE, recvbuff, count, datatype, peer, comm, stream);
    }

    /**
     * {@code ncclAlltoAll} (NCCL 2.28+).
     *
     * @param sendbuff the send buffer's address (world size blocks of {@code count})
     * @param recvbuff the receive buffer's address (world size blocks of {@code count})
     * @param count    elements per block
     * @param datatype the ncclDataType_t
     * @param comm     the communicator
     * @param stream   the CUDA stream
     * @return the ncclResult_t
     */
    public static int ncclAlltoAll(long sendbuff, long recvbuff, long count, int datatype, MemorySegment comm,
                                   MemorySegment stream) {
        return call(AlltoAll.HANDLE, sendbuff, recvbuff, count, datatype, comm, stream);
    }

    /**
     * {@code ncclGather} (NCCL 2.28+).
     *
     * @param sendbuff this rank's elements
     * @param recvbuff the gathered elements (the root's; 0 elsewhere)
     * @param count    elements per rank
     * @param datatype the ncclDataType_t
     * @param root     the receiving rank
     * @param comm     the communicator
     * @param stream   the CUDA stream
     * @return the ncclResult_t
     */
    public static int ncclGather(long sendbuff, long recvbuff, long count, int datatype, int root, MemorySegment comm,
                                 MemorySegment stream) {
        return call(Gather.HANDLE, sendbuff, recvbuff, count, datatype, root, comm, stream);
    }

    /**
     * {@code ncclScatter} (NCCL 2.28+).
     *
     * @param sendbuff the elements for every rank (the root's; 0 elsewhere)
     * @param recvbuff this rank's elements
     * @param count    elements per rank
     * @param datatype the ncclDataType_t
     * @param root     the sending rank
     * @param comm     the communicator
     * @param stream   the CUDA stream
     * @return the ncclResult_t
     */
    public static int ncclScatter(long sendbuff, long recvbuff, long count, int datatype, int root, MemorySegment comm,
                                  MemorySegment stream) {
        return call(Scatter.HANDLE, sendbuff, recvbuff, count, datatype, root, comm, stream);
    }

    /** Links {@code name} in the libraries jnccl loaded; also the other hand-written downcalls'. */
    static MethodHandle link(String name, FunctionDescriptor shape) {
        NativeAccess.check();
        // The generated bindings' lookup: the libraries jnccl loaded (NCCL or the host emulation).
        MemorySegment address = SymbolLookup.loaderLookup().findOrThrow(name);
        return Linker.nativeLinker().downcallHandle(address, shape);
    }

    private static int call(MethodHandle handle, long sendbuff, long recvbuff, long count, int datatype, int opOrRoot,
                            MemorySegment comm, MemorySegment stream) {
        try {
            return (int) handle.invokeExact(sendbuff, recvbuff, count, datatype, opOrRoot, comm, stream);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable e) {
            throw new AssertionError("a downcall threw a checked exception", e);
        }
    }

    private static int call(MethodHandle handle, long sendbuff, long recvbuff, long count, int datatype,
                            MemorySegment comm, MemorySegment stream) {
        try {
            return (int) handle.invokeExact(sendbuff, recvbuff, count, datatype, comm, stream);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable e) {
            throw new AssertionError("a downcall threw a checked exception", e);
        }
    }

    private static int call(MethodHandle handle, long buff, long count, int datatype, int peer, MemorySegment comm,
                            MemorySegment stream) {
        try {
            return (int) handle.invokeExact(buff, count, datatype, peer, comm, stream);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable e) {
            throw new AssertionError("a downcall threw a checked exception", e);
        }
    }
}
