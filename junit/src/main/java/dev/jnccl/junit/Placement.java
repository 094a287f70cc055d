package dev.jnccl.junit;

/**
 * Where the ranks of a {@link MultiRankTest} run. A world the placement cannot host is skipped (JUnit
 * reports it as aborted, with the reason), never failed. The backend itself ({@code -Djnccl.backend})
 * is chosen once per JVM: with {@code host} every placement runs on the emulation's devices.
 */
public enum Placement {
    /**
     * One rank per visible device, rank r on device r (on the host emulation: its virtual devices,
     * {@code JNCCL_HOST_DEVICES}, default 8). A world larger than the visible devices is skipped.
     */
    GPUS,
    /**
     * Every rank on device 0. Real NCCL allows several ranks of one process on one GPU from 2.30 on,
     * with the environment variable {@code NCCL_MULTI_RANK_GPU_ENABLE=1}; without either the world is
     * skipped with the reason. On the host emulation the extension sets the variable for the test.
     */
    SHARED,
    /**
     * The host emulation: one rank per virtual device, several per device when the world is larger.
     * Skipped when this JVM loaded the real CUDA libraries (run it with {@code -Djnccl.backend=host}).
     */
    HOST,
    /**
     * The run decides: the system property {@code jnccl.junit.placement} ({@code gpus}, {@code shared}
     * or {@code host}) when set, else {@link #GPUS}.
     */
    AUTO;

    /** The system property that {@link #AUTO} follows: {@value}. */
    public static final String PROPERTY = "jnccl.junit.placement";
}
