package dev.jnccl;

import dev.jnccl.bindings.VersionCodes;
import java.util.Comparator;

/**
 * The version of a native library jnccl uses (NCCL, the CUDA runtime, the CUDA driver).
 *
 * @param major major version
 * @param minor minor version
 * @param patch patch level (0 for CUDA, which reports major and minor only)
 */
public record LibraryVersion(int major, int minor, int patch) implements Comparable<LibraryVersion> {
    private static final Comparator<LibraryVersion> ORDER = Comparator.comparingInt(LibraryVersion::major)
            .thenComparingInt(LibraryVersion::minor).thenComparingInt(LibraryVersion::patch);

    /**
     * Checks the components.
     *
     * @throws IllegalArgumentException when a component is negative
     */
    public LibraryVersion {
        if (major < 0 || minor < 0 || patch < 0) {
            throw new IllegalArgumentException("LibraryVersion: negative component in " + major + "." + minor + "."
                    + patch);
        }
    }

    /**
     * Parses "major.minor" or "major.minor.patch" (a missing patch is 0), as {@link #toString()}
     * writes it.
     *
     * @param text the version text
     * @return the version
     * @throws IllegalArgumentException when {@code text} is not such a version
     */
    public static LibraryVersion parse(String text) {
        if (text == null) {
            throw new IllegalArgumentException("LibraryVersion.parse: text is null");
        }
        String[] parts = text.trim().split("\\.", -1);
        if (parts.length < 2 || parts.length > 3) {
            throw new IllegalArgumentException("LibraryVersion.parse: '" + text
                    + "' is not major.minor or major.minor.patch");
        }
        int[] numbers = new int[3];
        for (int i = 0; i < parts.length; i++) {
            try {
                numbers[i] = Integer.parseInt(parts[i]);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("LibraryVersion.parse: '" + parts[i] + "' in '" + text
                        + "' is not a number");
            }
        }
        return new LibraryVersion(numbers[0], numbers[1], numbers[2]);
    }

    /**
     * Whether this version is {@code major.minor} or newer.
     *
     * @param major the major version to compare with
     * @param minor the minor version to compare with
     * @return whether this version is at least {@code major.minor}
     */
    public boolean atLeast(int major, int minor) {
        return compareTo(new LibraryVersion(major, minor, 0)) >= 0;
    }

    /**
     * The version of a code the bindings keep ({@link VersionCodes}): the one version type, made
     * where a version leaves the native loader for the API.
     */
    static LibraryVersion of(int code) {
        return new LibraryVersion(VersionCodes.major(code), VersionCodes.minor(code), VersionCodes.patch(code));
    }

    @Override
    public int compareTo(LibraryVersion other) {
        return ORDER.compare(this, other);
    }

    /** "major.minor.patch", e.g. "2.28.3" or "13.0.0". */
    @Override
    public String toString() {
        return major + "." + minor + "." + patch;
    }
}
