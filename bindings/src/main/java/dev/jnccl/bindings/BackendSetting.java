package dev.jnccl.bindings;

import java.util.Locale;

/**
 * The value of the {@code jnccl.backend} setting: which implementation of the CUDA runtime + NCCL
 * ABI the loader puts behind the bindings, chosen once per JVM by the system property (or the
 * {@code JNCCL_BACKEND} environment variable). It differs from the API's {@code dev.jnccl.Backend},
 * the backend that runs, by {@link #AUTO}: a request the loader resolves to {@link #CUDA} or
 * {@link #HOST} ({@link LoadedLibraries#backend()} is never AUTO).
 */
public enum BackendSetting {
    /** The real libcudart and libnccl. The library's default: production never runs on the emulation by accident. */
    CUDA,
    /** jnccl's host emulation of the same ABI, on host memory (no GPU needed). */
    HOST,
    /** {@link #CUDA} when a CUDA device is visible, else {@link #HOST} with a WARN log line. */
    AUTO;

    /** The system property that selects the backend: {@value}. */
    public static final String PROPERTY = "jnccl.backend";
    /** The environment variable read when the system property is not set: {@value}. */
    public static final String ENVIRONMENT = "JNCCL_BACKEND";

    /** {@return the configured setting: the system property, else the environment variable, else {@link #CUDA}} */
    public static BackendSetting configured() {
        String value = System.getProperty(PROPERTY);
        String source = "system property " + PROPERTY;
        if (value == null || value.isBlank()) {
            value = System.getenv(ENVIRONMENT);
            source = "environment variable " + ENVIRONMENT;
        }
        if (value == null || value.isBlank()) {
            return CUDA;
        }
        return parse(value, source);
    }

    static BackendSetting parse(String value, String source) {
        try {
            return valueOf(value.trim().toUpperCase(Locale.ROOT));
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(
                    source + " is '" + value + "'; expected one of cuda, host, auto");
        }
    }

    /** {@return the lower-case name, as written in the property} */
    public String id() {
        return name().toLowerCase(Locale.ROOT);
    }
}
