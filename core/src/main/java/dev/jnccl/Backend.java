package dev.jnccl;

/**
 * What runs jnccl's collectives in this JVM, as resolved when the native libraries were loaded
 * (the {@code jnccl.backend} system property or the {@code JNCCL_BACKEND} environment variable:
 * {@code cuda}, {@code host}, or {@code auto} for CUDA when a device is visible, else the host).
 * Ask it with {@link JncclRuntime#query()}; no communicator is needed.
 */
public enum Backend {
    /** The real CUDA runtime and NCCL, on GPUs. */
    CUDA,
    /**
     * jnccl's host emulation of the same ABI: "devices" are host threads and host memory, for
     * development and tests without a GPU. Results follow the emulation's documented arithmetic,
     * performance figures mean nothing.
     */
    HOST
}
