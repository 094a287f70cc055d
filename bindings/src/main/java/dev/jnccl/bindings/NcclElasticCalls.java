package dev.jnccl.bindings;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;

/**
 * Hand-written downcalls of NCCL's calls that change a communicator's membership: {@code
 * ncclCommShrink} (NCCL 2.27+), {@code ncclCommRevoke} (2.28.7+), {@code ncclCommGetUniqueId} and
 * {@code ncclCommGrow} (2.29.2+). They are newer than the headers the generated bindings come from,
 * so each is linked on first use: an NCCL that lacks one fails only when it is called. Callers ask
 * {@link NcclFeature#SHRINK}, {@link NcclFeature#REVOKE} and {@link NcclFeature#GROW} through
 * {@link LoadedLibraries#supports} first (the host emulation implements all four). Shapes as
 * NVIDIA's {@code src/nccl.h.in} at 2.30. Not API.
 */
public final class NcclElasticCalls {
    /** {@code shrinkFlags}: the survivors' shrink waits for the parent's pending work. */
    public static final int NCCL_SHRINK_DEFAULT = 0x00;
    /** {@code shrinkFlags}: the parent's pending work is aborted first (for a parent in error). */
    public static final int NCCL_SHRINK_ABORT = 0x01;

    private NcclElasticCalls() {}

    /** Linked on first use only (an NCCL before 2.27 has no such symbol). */
    private static final class Shrink {
        static final MethodHandle HANDLE = NcclBufferCalls.link("ncclCommShrink", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS,
                JAVA_INT, ADDRESS, ADDRESS, JAVA_INT));
    }

    /** Linked on first use only (an NCCL before 2.28.7 has no such symbol). */
    private static final class Revoke {
        static final MethodHandle HANDLE = NcclBufferCalls.link("ncclCommRevoke", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
    }

    /** Linked on first use only (an NCCL before 2.29.2 has no such symbol). */
    private static final class GetUniqueId {
        static final MethodHandle HANDLE = NcclBufferCalls.link("ncclCommGetUniqueId", FunctionDescriptor.of(JAVA_INT, ADDRESS,
                ADDRESS));
    }

    /** Linked on first use only (an NCCL before 2.29.2 has no such symbol). */
    private static final class Grow {
        static final MethodHandle HANDLE = NcclBufferCalls.link("ncclCommGrow", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT,
                ADDRESS, JAVA_INT, ADDRESS, ADDRESS));
    }

    /**
     * {@code ncclCommShrink}: called by every rank that is not excluded (the excluded ranks never
     * call, they may be dead). The new communicator's ranks follow the survivors' old ranks.
     *
     * @param comm              the parent communicator
     * @param excludeRanksList  {@code int[excludeRanksCount]}: the parent's ranks left out
     * @param excludeRanksCount how many ranks are left out
     * @param newcomm           {@code ncclComm_t*}: receives the survivors' communicator (on a
     *                          non-blocking parent, once the parent left {@code ncclInProgress})
     * @param config            {@code ncclConfig_t*} of the new communicator, or NULL to inherit the parent's
     * @param shrinkFlags       {@link #NCCL_SHRINK_DEFAULT} or {@link #NCCL_SHRINK_ABORT}
     * @return the ncclResult_t
     */
    public static int ncclCommShrink(MemorySegment comm, MemorySegment excludeRanksList, int excludeRanksCount,
                                     MemorySegment newcomm, MemorySegment config, int shrinkFlags) {
        return call(Shrink.HANDLE, comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
    }

    /**
     * {@code ncclCommRevoke}: ends the communicator's pending work with an error and refuses new
     * operations; shrink, split, destroy and abort still work.
     *
     * @param comm        the communicator
     * @param revokeFlags must be 0
     * @return the ncclResult_t
     */
    public static int ncclCommRevoke(MemorySegment comm, int revokeFlags) {
        return call(Revoke.HANDLE, comm, revokeFlags);
    }

    /**
     * {@code ncclCommGetUniqueId}: on the existing communicator's rank 0, the id that the new ranks
     * and the existing ones pass to {@link #ncclCommGrow}.
     *
     * @param comm     the existing communicator
     * @param uniqueId {@code ncclUniqueId*} (128 bytes): receives the id
     * @return the ncclResult_t
     */
    public static int ncclCommGetUniqueId(MemorySegment comm, MemorySegment uniqueId) {
        return call(GetUniqueId.HANDLE, comm, uniqueId);
    }

    /**
     * {@code ncclCommGrow}: a communicator of {@code nRanks} ranks made of an existing one's ranks
     * (which pass it and {@code rank} -1, keeping their ranks) and new ranks (which pass NULL and
     * their rank in [old size, nRanks)).
     *
     * @param comm     the existing communicator, or NULL on a new rank
     * @param nRanks   the new communicator's size
     * @param uniqueId {@code const ncclUniqueId*}: from {@link #ncclCommGetUniqueId} on the existing rank 0
     * @param rank     -1 on an existing rank, else the new rank's rank
     * @param newcomm  {@code ncclComm_t*}: receives the new communicator
     * @param config   {@code ncclConfig_t*} of the new communicator, or NULL
     * @return the ncclResult_t
     */
    public static int ncclCommGrow(MemorySegment comm, int nRanks, MemorySegment uniqueId, int rank,
                                   MemorySegment newcomm, MemorySegment config) {
        return call(Grow.HANDLE, comm, nRanks, uniqueId, rank, newcomm, config);
    }

    /** These calls are rare (a membership change), so one generic invocation serves all four. */
    private static int call(MethodHandle handle, Object... arguments) {
        try {
            return (int) handle.invokeWithArguments(arguments);
        } catch (Error | RuntimeException e) {
            throw e;
        } catch (Throwable e) {
            throw new AssertionError("a downcall threw a checked exception", e);
        }
    }
}
