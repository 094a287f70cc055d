package dev.jnccl.internal;

import java.util.List;
import org.slf4j.Logger;

/** Closing several resources where one failure must not keep the others open. Not API. */
public final class Resources {
    private Resources() {}

    /** Adds {@code resource} to {@code created} (to close on a later failure) and returns it. */
    public static <T extends AutoCloseable> T remember(List<AutoCloseable> created, T resource) {
        created.add(resource);
        return resource;
    }

    /**
     * Closes every resource in order. Failures are added to {@code primary} as suppressed
     * exceptions when it is given, else logged as warnings on {@code log}.
     */
    public static void closeAll(List<AutoCloseable> resources, RuntimeException primary, Logger log) {
        for (AutoCloseable resource : resources) {
            try {
                resource.close();
            } catch (Exception e) {
                if (primary != null) {
                    primary.addSuppressed(e);
                } else {
                    log.warn("closing {} failed", resource, e);
                }
            }
        }
    }
}
