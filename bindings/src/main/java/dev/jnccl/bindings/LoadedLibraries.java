package dev.jnccl.bindings;

import java.nio.file.Path;

/**
 * The native libraries that back the bindings in this JVM, with their versions.
 *
 * @param backend        what the {@link BackendSetting} resolved to: {@link BackendSetting#CUDA} or
 *                       {@link BackendSetting#HOST}, never AUTO
 * @param ncclPath       the file that provides the NCCL functions
 * @param cudartPath     the file that provides the CUDA runtime functions (the same file on the host backend)
 * @param nccl           ncclGetVersion, decoded
 * @param cudaRuntime    cudaRuntimeGetVersion, decoded
 * @param cudaDriver     cudaDriverGetVersion, decoded (0.0.0 when no driver is installed)
 */
public record LoadedLibraries(BackendSetting backend, Path ncclPath, Path cudartPath, LibraryVersion nccl,
                              LibraryVersion cudaRuntime, LibraryVersion cudaDriver) {

    /**
     * Whether the loaded NCCL has {@code feature}.
     *
     * @param feature the feature asked about
     * @return whether this NCCL version is at least the feature's first version and, for a
     *         feature that needs a function, the library has it ({@link NcclFeature#isLinked()})
     */
    public boolean supports(NcclFeature feature) {
        return feature.isSupportedBy(nccl) && feature.isLinked();
    }

    /** {@return one line for logs: backend, versions and files} */
    public String describe() {
        return "backend " + backend.id() + ", NCCL " + nccl + " (" + ncclPath + "), CUDA runtime " + cudaRuntime
                + " (" + cudartPath + "), driver " + cudaDriver;
    }
}
