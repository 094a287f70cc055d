package dev.jnccl.bindings;

import java.nio.file.Path;

/**
 * The native libraries that back the bindings in this JVM, with their versions as
 * {@link VersionCodes} codes (core hands them to users as {@code dev.jnccl.LibraryVersion}).
 *
 * @param backend        what the {@link BackendSetting} resolved to: {@link BackendSetting#CUDA} or
 *                       {@link BackendSetting#HOST}, never AUTO
 * @param ncclPath       the file that provides the NCCL functions
 * @param cudartPath     the file that provides the CUDA runtime functions (the same file on the host backend)
 * @param ncclVersion        ncclGetVersion's code
 * @param cudaRuntimeVersion cudaRuntimeGetVersion's code
 * @param cudaDriverVersion  cudaDriverGetVersion's code (0, version 0.0.0, when no driver is installed)
 */
public record LoadedLibraries(BackendSetting backend, Path ncclPath, Path cudartPath, int ncclVersion,
                              int cudaRuntimeVersion, int cudaDriverVersion) {

    /**
     * Whether the loaded NCCL has {@code feature}.
     *
     * @param feature the feature asked about
     * @return whether, for a feature that needs a function, the library has it ({@link
     *         NcclFeature#isLinked()}) and either this NCCL version is at least the feature's first
     *         version or the library is the host emulation (which exports exactly the functions it
     *         implements, some of them newer than the version it reports); for a feature that needs
     *         no function, whether the version suffices
     */
    public boolean supports(NcclFeature feature) {
        boolean emulated = backend == BackendSetting.HOST && feature.needsSymbol();
        return (emulated || feature.isSupportedBy(ncclVersion)) && feature.isLinked();
    }

    /** {@return one line for logs: backend, versions and files} */
    public String describe() {
        return "backend " + backend.id() + ", NCCL " + VersionCodes.text(ncclVersion) + " (" + ncclPath
                + "), CUDA runtime " + VersionCodes.text(cudaRuntimeVersion) + " (" + cudartPath + "), driver "
                + VersionCodes.text(cudaDriverVersion);
    }
}
