package dev.jnccl.internal;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.BooleanSupplier;

/**
 * Which objects something else still depends on, so that closing one can be refused while it is
 * in use: a communicator pins device memory that NCCL holds registered, and the memory's close
 * refuses while a pin is held (freeing memory NCCL still has registered would leave NCCL with a
 * dangling registration). Objects are compared by identity; a pin names its holder for the
 * message. Not API.
 */
public final class Pins {
    private static final Map<Object, List<String>> PINNED = new IdentityHashMap<>();

    private Pins() {}

    /**
     * Pins {@code resource} for {@code holder}, unless it is already closed.
     *
     * @param resource the object that must stay open
     * @param holder   who depends on it, for messages
     * @param closed   whether {@code resource} is closed (asked under the same lock as {@link #unlessPinned})
     * @return false when {@code resource} was closed (nothing pinned)
     */
    public static synchronized boolean pin(Object resource, String holder, BooleanSupplier closed) {
        Objects.requireNonNull(resource, "resource");
        if (closed.getAsBoolean()) {
            return false;
        }
        PINNED.computeIfAbsent(resource, r -> new ArrayList<>()).add(holder);
        return true;
    }

    /**
     * Drops one pin of {@code holder} on {@code resource}.
     *
     * @param resource the pinned object
     * @param holder   the holder given to {@link #pin}
     */
    public static synchronized void unpin(Object resource, String holder) {
        List<String> holders = PINNED.get(resource);
        if (holders != null && holders.remove(holder) && holders.isEmpty()) {
            PINNED.remove(resource);
        }
    }

    /**
     * Runs {@code close} unless {@code resource} is pinned; atomic with {@link #pin}.
     *
     * @param resource the object to close
     * @param close    how it is closed
     * @return null when closed, else the holders of its pins
     */
    public static synchronized List<String> unlessPinned(Object resource, Runnable close) {
        List<String> holders = PINNED.get(resource);
        if (holders != null) {
            return List.copyOf(holders);
        }
        close.run();
        return null;
    }
}
