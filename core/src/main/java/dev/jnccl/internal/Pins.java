package dev.jnccl.internal;

import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
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
    /** Objects whose close is running (guarded by the class lock): a pin is refused as for a closed one. */
    private static final Set<Object> CLOSING = Collections.newSetFromMap(new IdentityHashMap<>());

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
        if (CLOSING.contains(resource) || closed.getAsBoolean()) {
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
     * Runs {@code close} unless {@code resource} is pinned; atomic with {@link #pin}: a pin while
     * the close runs is refused.
     *
     * @param resource the object to close
     * @param close    how it is closed
     * @return null when closed, else the holders of its pins
     */
    public static List<String> unlessPinned(Object resource, Runnable close) {
        synchronized (Pins.class) {
            List<String> holders = PINNED.get(resource);
            if (holders != null) {
                return List.copyOf(holders);
            }
            CLOSING.add(resource);
        }
        // Outside the lock: a close may wait for the device (cudaFree waits for the work in flight,
        // a collective whose peer is gone included), and it must hold up no other resource's close.
        try {
            close.run();
        } finally {
            synchronized (Pins.class) {
                CLOSING.remove(resource);
            }
        }
        return null;
    }
}
