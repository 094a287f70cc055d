package dev.jnccl.bindings;

/**
 * A CUDA runtime or driver version as reported by {@code cudaRuntimeGetVersion} /
 * {@code cudaDriverGetVersion} (1000 * major + 10 * minor, e.g. 13000 = 13.0).
 *
 * @param major major version
 * @param minor minor version
 */
public record CudaVersion(int major, int minor) {

    /**
     * Decodes the integer of {@code cudaRuntimeGetVersion} (major * 1000 + minor * 10).
     *
     * @param code the encoded version
     * @return the version it encodes
     */
    public static CudaVersion decode(int code) {
        if (code < 0) {
            throw new IllegalArgumentException("CUDA version code " + code + " is not a version");
        }
        return new CudaVersion(code / 1000, (code % 1000) / 10);
    }

    @Override
    public String toString() {
        return major + "." + minor;
    }
}
