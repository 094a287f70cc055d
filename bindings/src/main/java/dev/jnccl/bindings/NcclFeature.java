package dev.jnccl.bindings;

/**
 * Optional NCCL features and the first NCCL version that has them. Modules consult this table
 * instead of catching linkage errors. Hardware requirements (e.g. FP8 reductions also need an
 * sm_90 or newer GPU) are NCCL's to check; it answers with ncclInvalidArgument.
 */
public enum NcclFeature {
    /** ncclBfloat16 and the ncclAvg reduction. */
    BFLOAT16_AND_AVG(2, 10),
    /** ncclCommInitRankConfig and non-blocking communicators (ncclConfig_t.blocking = 0). */
    CONFIG_AND_NONBLOCKING(2, 14),
    /** ncclCommSplit. */
    COMM_SPLIT(2, 18),
    /** ncclMemAlloc / ncclMemFree and ncclCommRegister / ncclCommDeregister. */
    MEM_ALLOC_AND_REGISTER(2, 19),
    /** ncclFloat8e4m3 and ncclFloat8e5m2 data types. */
    FP8(2, 24);

    private final NcclVersion since;

    NcclFeature(int major, int minor) {
        this.since = new NcclVersion(major, minor, 0);
    }

    /** {@return the first NCCL version with this feature} */
    public NcclVersion since() {
        return since;
    }

    /**
     * Whether NCCL {@code version} has this feature.
     *
     * @param version an NCCL version
     * @return whether {@code version} is at least {@link #since()}
     */
    public boolean isSupportedBy(NcclVersion version) {
        return version.compareTo(since) >= 0;
    }
}
