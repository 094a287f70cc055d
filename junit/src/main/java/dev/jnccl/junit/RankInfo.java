package dev.jnccl.junit;

import dev.jnccl.Backend;
import java.util.Objects;

/**
 * Who the calling rank of a {@link MultiRankTest} is: declare a parameter of this type to receive it
 * (each rank gets its own).
 *
 * @param rank    this rank, 0 to {@code world - 1}
 * @param world   the number of ranks of this invocation
 * @param device  the CUDA device (or emulated device) this rank's thread uses
 * @param backend what runs the collectives: the GPUs or the host emulation
 */
public record RankInfo(int rank, int world, int device, Backend backend) {
    /**
     * Checks the values.
     *
     * @throws IllegalArgumentException for a world below 1, a rank outside [0, world - 1] or a negative device
     * @throws NullPointerException     for a null backend
     */
    public RankInfo {
        if (world < 1) {
            throw new IllegalArgumentException("RankInfo: world " + world + " is below 1");
        }
        if (rank < 0 || rank >= world) {
            throw new IllegalArgumentException("RankInfo: rank " + rank + " is outside [0, " + (world - 1) + "]");
        }
        if (device < 0) {
            throw new IllegalArgumentException("RankInfo: device " + device + " is negative");
        }
        Objects.requireNonNull(backend, "RankInfo: backend is null");
    }
}
