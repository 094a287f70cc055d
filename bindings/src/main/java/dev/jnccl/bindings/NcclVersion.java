package dev.jnccl.bindings;

/**
 * An NCCL version as reported by {@code ncclGetVersion}.
 *
 * @param major major version (2)
 * @param minor minor version
 * @param patch patch level
 */
public record NcclVersion(int major, int minor, int patch) implements Comparable<NcclVersion> {

    /** The oldest NCCL jnccl accepts: it needs ncclMemAlloc and ncclCommRegister (2.19). */
    public static final NcclVersion MINIMUM = new NcclVersion(2, 19, 0);

    /** Checks the parts: none may be negative. */
    public NcclVersion {
        if (major < 0 || minor < 0 || patch < 0) {
            throw new IllegalArgumentException("NcclVersion: negative component in " + major + "." + minor + "." + patch);
        }
    }

    /**
     * Decodes the integer of {@code ncclGetVersion}. NCCL up to 2.8 encoded X*1000 + Y*100 + Z
     * (2.8.4 = 2804); from 2.9 on it is X*10000 + Y*100 + Z (2.28.3 = 22803). The two ranges don't
     * overlap: old codes are below 10000, new ones are at least 20900.
     *
     * @param code the value of {@code ncclGetVersion}
     * @return the version it encodes
     */
    public static NcclVersion decode(int code) {
        if (code <= 0) {
            throw new IllegalArgumentException("ncclGetVersion code " + code + " is not a version");
        }
        if (code < 10000) {
            return new NcclVersion(code / 1000, (code % 1000) / 100, code % 100);
        }
        return new NcclVersion(code / 10000, (code % 10000) / 100, code % 100);
    }

    /** {@return this version in the current (2.9+) encoding of {@code NCCL_VERSION_CODE}} */
    public int code() {
        return major * 10000 + minor * 100 + patch;
    }

    /**
     * Whether this version is {@code major.minor} or newer.
     *
     * @param major the major version asked for
     * @param minor the minor version asked for
     * @return whether this version is at least {@code major.minor.0}
     */
    public boolean atLeast(int major, int minor) {
        return compareTo(new NcclVersion(major, minor, 0)) >= 0;
    }

    @Override
    public int compareTo(NcclVersion o) {
        if (major != o.major) return Integer.compare(major, o.major);
        if (minor != o.minor) return Integer.compare(minor, o.minor);
        return Integer.compare(patch, o.patch);
    }

    @Override
    public String toString() {
        return major + "." + minor + "." + patch;
    }
}
