package dev.jnccl.bindings;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;

/**
 * Hand-written downcalls of NCCL's user-defined reduction operators, in the shapes jextract makes
 * (the generated {@code dev.jnccl.bindings.nccl.Nccl} predates them). Signatures from NVIDIA/nccl
 * v2.28.3 {@code src/nccl.h.in} (NCCL 2.11+):
 *
 * <pre>
 * typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;
 * ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
 *                                       ncclScalarResidence_t residence, ncclComm_t comm);
 * ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
 * </pre>
 *
 * Each function is looked up at its first call, in the loader lookup the generated bindings use;
 * callers check {@link NcclFeature#PRE_MUL_SUM} first, so that an older library gives a clear
 * exception instead of a link error. Not API.
 */
public final class NcclRedOps {
    /** ncclScalarHostImmediate: the scalar is read before ncclRedOpCreatePreMulSum returns. */
    public static final int SCALAR_HOST_IMMEDIATE = 1;

    private NcclRedOps() {}

    private static final class Create {
        static final MethodHandle HANDLE = handle("ncclRedOpCreatePreMulSum", FunctionDescriptor.of(
                ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_INT,
                ValueLayout.JAVA_INT, ValueLayout.ADDRESS));
    }

    private static final class Destroy {
        static final MethodHandle HANDLE = handle("ncclRedOpDestroy", FunctionDescriptor.of(
                ValueLayout.JAVA_INT, ValueLayout.JAVA_INT, ValueLayout.ADDRESS));
    }

    private static MethodHandle handle(String name, FunctionDescriptor descriptor) {
        return Linker.nativeLinker().downcallHandle(SymbolLookup.loaderLookup().findOrThrow(name), descriptor);
    }

    /**
     * ncclRedOpCreatePreMulSum.
     *
     * @param op        where NCCL writes the new operator (an int)
     * @param scalar    the multiplier, encoded in {@code datatype}
     * @param datatype  the ncclDataType_t the operator is for
     * @param residence where the scalar lives ({@link #SCALAR_HOST_IMMEDIATE})
     * @param comm      the communicator the operator is for
     * @return the ncclResult_t
     */
    public static int ncclRedOpCreatePreMulSum(MemorySegment op, MemorySegment scalar, int datatype, int residence,
                                               MemorySegment comm) {
        try {
            return (int) Create.HANDLE.invokeExact(op, scalar, datatype, residence, comm);
        } catch (Throwable e) {
            throw new AssertionError("ncclRedOpCreatePreMulSum", e);
        }
    }

    /**
     * ncclRedOpDestroy.
     *
     * @param op   an operator made by {@link #ncclRedOpCreatePreMulSum} on {@code comm}
     * @param comm the communicator
     * @return the ncclResult_t
     */
    public static int ncclRedOpDestroy(int op, MemorySegment comm) {
        try {
            return (int) Destroy.HANDLE.invokeExact(op, comm);
        } catch (Throwable e) {
            throw new AssertionError("ncclRedOpDestroy", e);
        }
    }
}
