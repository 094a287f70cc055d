package dev.jnccl.bindings;

import java.util.Comparator;

/**
 * The version of a native library the bindings load (NCCL, the CUDA runtime, the CUDA driver),
 * decoded from the integer the library reports. Core hands it on as the API's
 * {@code dev.jnccl.LibraryVersion}, which has the same components and text (and checks them: the
 * decoders here refuse a code that is no version, so their parts are never negative).
 *
 * @param major major version
 * @param minor minor version
 * @param patch patch level (0 for CUDA, which reports major and minor only)
 */
public record LibraryVersion(int major, int minor, int patch) implements Comparable<LibraryVersion> {

    /** The oldest NCCL jnccl accepts: it needs ncclMemAlloc and ncclCommRegister (2.19). */
    public static final LibraryVersion NCCL_MINIMUM = new LibraryVersion(2, 19, 0);

    private static final Comparator<LibraryVersion> ORDER = Comparator.comparingInt(LibraryVersion::major)
            .thenComparingInt(LibraryVersion::minor).thenComparingInt(LibraryVersion::patch);

    /**
     * Decodes the integer of {@code ncclGetVersion}. NCCL up to 2.8 encoded X*1000 + Y*100 + Z
     * (2.8.4 = 2804); from 2.9 on it is X*10000 + Y*100 + Z (2.28.3 = 22803). The two ranges don't
     * overlap: old codes are below 10000, new ones are at least 20900.
     *
     * @param code the value of {@code ncclGetVersion}
     * @return the version it encodes
     */
    public static LibraryVersion decodeNccl(int code) {
        if (code <= 0) {
            throw new IllegalArgumentException("ncclGetVersion code " + code + " is not a version");
        }
        if (code < 10000) {
            return new LibraryVersion(code / 1000, (code % 1000) / 100, code % 100);
        }
        return new LibraryVersion(code / 10000, (code % 10000) / 100, code % 100);
    }

    /**
     * Decodes the integer of {@code cudaRuntimeGetVersion} or {@code cudaDriverGetVersion}
     * (major * 1000 + minor * 10, e.g. 13000 = 13.0; patch is 0).
     *
     * @param code the encoded version (0: no driver installed)
     * @return the version it encodes
     */
    public static LibraryVersion decodeCuda(int code) {
        if (code < 0) {
            throw new IllegalArgumentException("CUDA version code " + code + " is not a version");
        }
        return new LibraryVersion(code / 1000, (code % 1000) / 10, 0);
    }

    @Override
    public int compareTo(LibraryVersion other) {
        return ORDER.compare(this, other);
    }

    /** "major.minor.patch", e.g. "2.28.3" or "13.0.0", as the API's version writes it. */
    @Override
    public String toString() {
        return major + "." + minor + "." + patch;
    }
}
