package dev.jnccl.bindings;

import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.bindings.nccl.ncclConfig_t;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SegmentAllocator;

/**
 * ncclConfig_t values. {@code NCCL_CONFIG_INITIALIZER} is a macro jextract cannot translate, so
 * this fills the struct the way the macro does: size, magic, the header's version, and every
 * attribute "undefined" so NCCL applies its defaults.
 */
public final class NcclConfigs {
    /** ncclConfig_t.magic, from NCCL_CONFIG_INITIALIZER. */
    public static final int MAGIC = 0xcafebeef;

    private NcclConfigs() {}

    /**
     * {@return a new ncclConfig_t as NCCL_CONFIG_INITIALIZER would make it}
     *
     * @param allocator where the struct is allocated
     */
    public static MemorySegment allocate(SegmentAllocator allocator) {
        MemorySegment config = ncclConfig_t.allocate(allocator);
        int undefined = Nccl.NCCL_CONFIG_UNDEF_INT();
        ncclConfig_t.size(config, ncclConfig_t.layout().byteSize());
        ncclConfig_t.magic(config, MAGIC);
        ncclConfig_t.version(config, Nccl.NCCL_VERSION_CODE());
        ncclConfig_t.blocking(config, undefined);
        ncclConfig_t.cgaClusterSize(config, undefined);
        ncclConfig_t.minCTAs(config, undefined);
        ncclConfig_t.maxCTAs(config, undefined);
        ncclConfig_t.netName(config, MemorySegment.NULL);
        ncclConfig_t.splitShare(config, undefined);
        ncclConfig_t.trafficClass(config, undefined);
        ncclConfig_t.commName(config, MemorySegment.NULL);
        ncclConfig_t.collnetEnable(config, undefined);
        ncclConfig_t.CTAPolicy(config, undefined);
        ncclConfig_t.shrinkShare(config, undefined);
        ncclConfig_t.nvlsCTAs(config, undefined);
        ncclConfig_t.nChannelsPerNetPeer(config, undefined);
        ncclConfig_t.nvlinkCentricSched(config, undefined);
        return config;
    }
}
