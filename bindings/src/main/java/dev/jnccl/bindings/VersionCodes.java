package dev.jnccl.bindings;

/**
 * The versions of the native libraries as the bindings keep them: one {@code int} in NCCL's own
 * encoding, {@code NCCL_VERSION(major, minor, patch)} = major * 10000 + minor * 100 + patch (what
 * {@code ncclGetVersion} reports since NCCL 2.9; 2.28.3 = 22803), for NCCL and CUDA alike, so that
 * comparing two codes as ints compares the versions. The version type is core's API record
 * {@code dev.jnccl.LibraryVersion}, made from a code there; the bindings, which cannot name it, only
 * compare codes and write them in their messages as it writes a version. Not API.
 */
public final class VersionCodes {
    /** The largest major version whose codes fit an int. */
    private static final int MAX_MAJOR = Integer.MAX_VALUE / 10000 - 1;
    /** The oldest NCCL jnccl accepts: it needs ncclMemAlloc and ncclCommRegister (2.19). */
    public static final int NCCL_MINIMUM = of(2, 19, 0);

    private VersionCodes() {}

    /**
     * The code of {@code major.minor.patch}.
     *
     * @param major the major version, in [0, 214747]
     * @param minor the minor version, in [0, 100)
     * @param patch the patch level, in [0, 100)
     * @return major * 10000 + minor * 100 + patch
     * @throws IllegalArgumentException when a component is out of its range
     */
    public static int of(int major, int minor, int patch) {
        if (major < 0 || major > MAX_MAJOR || minor < 0 || minor > 99 || patch < 0 || patch > 99) {
            throw new IllegalArgumentException("VersionCodes.of: " + major + "." + minor + "." + patch
                    + " has no code: expected major 0 to " + MAX_MAJOR + ", minor and patch 0 to 99");
        }
        return major * 10000 + minor * 100 + patch;
    }

    /**
     * The code of the version {@code ncclGetVersion} reports. NCCL up to 2.8 encoded X*1000 + Y*100 + Z
     * (2.8.4 = 2804); from 2.9 on it is X*10000 + Y*100 + Z (2.28.3 = 22803), the code itself. The two
     * ranges don't overlap: old codes are below 10000, new ones are at least 20900.
     *
     * @param reported the value of {@code ncclGetVersion}
     * @return the version's code
     * @throws IllegalArgumentException when {@code reported} is not positive
     */
    public static int fromNccl(int reported) {
        if (reported <= 0) {
            throw new IllegalArgumentException("ncclGetVersion code " + reported + " is not a version");
        }
        return reported < 10000 ? of(reported / 1000, reported % 1000 / 100, reported % 100) : reported;
    }

    /**
     * The code of the version {@code cudaRuntimeGetVersion} or {@code cudaDriverGetVersion} reports
     * (major * 1000 + minor * 10, e.g. 13000 = 13.0; the patch is 0).
     *
     * @param reported the reported value (0: no driver installed, version 0.0.0)
     * @return the version's code
     * @throws IllegalArgumentException when {@code reported} is negative
     */
    public static int fromCuda(int reported) {
        if (reported < 0) {
            throw new IllegalArgumentException("CUDA version code " + reported + " is not a version");
        }
        return of(reported / 1000, reported % 1000 / 10, 0);
    }

    /**
     * {@return the major version of {@code code}}
     *
     * @param code a version code
     */
    public static int major(int code) {
        return code / 10000;
    }

    /**
     * {@return the minor version of {@code code}}
     *
     * @param code a version code
     */
    public static int minor(int code) {
        return code / 100 % 100;
    }

    /**
     * {@return the patch level of {@code code}}
     *
     * @param code a version code
     */
    public static int patch(int code) {
        return code % 100;
    }

    /**
     * {@return "major.minor.patch" of {@code code}, e.g. "2.28.3" or "13.0.0", as the API's version writes it}
     *
     * @param code a version code
     */
    public static String text(int code) {
        return major(code) + "." + minor(code) + "." + patch(code);
    }
}
