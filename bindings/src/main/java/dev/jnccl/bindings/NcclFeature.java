package dev.jnccl.bindings;

import java.lang.foreign.SymbolLookup;

/**
 * Optional NCCL features and the first NCCL version that has them. Modules consult this table
 * instead of catching linkage errors. Hardware requirements (e.g. FP8 reductions also need an
 * sm_90 or newer GPU) are NCCL's to check; it answers with ncclInvalidArgument.
 *
 * <p>A feature that needs a function is available where that function is linked and either the
 * reported version suffices or the loaded library is the host emulation ({@link
 * LoadedLibraries#supports}): the emulation reports the NCCL version whose ABI it copies but
 * implements some later functions too (shrink, revoke, grow), and it exports exactly the functions
 * it implements, so there the symbol alone decides.
 */
public enum NcclFeature {
    /** ncclBfloat16 and the ncclAvg reduction. */
    BFLOAT16_AND_AVG(2, 10),
    /** ncclRedOpCreatePreMulSum / ncclRedOpDestroy: a sum that pre-multiplies each input by a scalar. */
    PRE_MUL_SUM(2, 11, "ncclRedOpCreatePreMulSum"),
    /** ncclCommInitRankConfig and non-blocking communicators (ncclConfig_t.blocking = 0). */
    CONFIG_AND_NONBLOCKING(2, 14),
    /** ncclCommSplit. */
    COMM_SPLIT(2, 18),
    /** ncclMemAlloc / ncclMemFree and ncclCommRegister / ncclCommDeregister. */
    MEM_ALLOC_AND_REGISTER(2, 19),
    /** ncclFloat8e4m3 and ncclFloat8e5m2 data types. */
    FP8(2, 24),
    /** ncclAlltoAll (a library that reports 2.28 or newer but lacks the symbol does not have it). */
    ALL_TO_ALL(2, 28, "ncclAlltoAll"),
    /** ncclGather (called through {@link NcclBufferCalls}). */
    GATHER(2, 28, "ncclGather"),
    /** ncclScatter (called through {@link NcclBufferCalls}). */
    SCATTER(2, 28, "ncclScatter"),
    /** ncclCommShrink: a communicator of the survivors, without the participation of the excluded ranks. */
    SHRINK(2, 27, 0, "ncclCommShrink"),
    /** ncclCommRevoke: ends a communicator's pending work and refuses new work (shrink, split, abort still work). */
    REVOKE(2, 28, 7, "ncclCommRevoke"),
    /** ncclCommGetUniqueId and ncclCommGrow: admits new ranks into a communicator. */
    GROW(2, 29, 2, "ncclCommGrow");

    /** The first NCCL version with this feature, as a {@link VersionCodes} code. */
    private final int since;
    /** The function that must be in the loaded library, or null when the version alone decides. */
    private final String symbol;
    /** Whether {@link #symbol} was found; looked up once, after the libraries were loaded. */
    private volatile Boolean linked;

    NcclFeature(int major, int minor) {
        this(major, minor, null);
    }

    NcclFeature(int major, int minor, String symbol) {
        this(major, minor, 0, symbol);
    }

    NcclFeature(int major, int minor, int patch, String symbol) {
        this.since = VersionCodes.of(major, minor, patch);
        this.symbol = symbol;
    }

    /** {@return whether this feature names the function it needs (else the version alone decides)} */
    boolean needsSymbol() {
        return symbol != null;
    }

    /** {@return the first NCCL version with this feature, as a {@link VersionCodes} code} */
    public int sinceVersion() {
        return since;
    }

    /**
     * Whether NCCL {@code version} has this feature.
     *
     * @param version an NCCL version, as a {@link VersionCodes} code
     * @return whether {@code version} is at least {@link #sinceVersion()}
     */
    public boolean isSupportedBy(int version) {
        return version >= since;
    }

    /**
     * Whether the function this feature needs is in the loaded NCCL library (always true for a
     * feature that only needs a version). Looked up once, in the same loader lookup the generated
     * bindings use, so a call through them cannot fail to link when this says true.
     *
     * @return whether the feature's function can be called
     */
    public boolean isLinked() {
        if (symbol == null) {
            return true;
        }
        Boolean found = linked;
        if (found == null) {
            found = SymbolLookup.loaderLookup().find(symbol).isPresent();
            if (found || NativeLibraries.loadedOrNull() != null) {
                linked = found; // a miss before the libraries were loaded is asked again later
            }
        }
        return found;
    }
}
