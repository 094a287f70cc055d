package dev.jnccl;

import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.internal.Pins;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.Consumer;

/**
 * Device memory registered with one communicator ({@link Communicator#register}, NCCL's
 * ncclCommRegister): NCCL may then move data from and to it without staging copies. Commands on
 * tensors of registered memory work exactly as on any other; only their speed may change.
 *
 * <p>{@link #close()} deregisters (ncclCommDeregister); closing twice does nothing more, and the
 * communicator's close deregisters what is still registered. While registered, the memory refuses
 * {@link DeviceMemory#close()}: NCCL would otherwise hold a registration of freed memory. Close a
 * registration only once the work that used it has completed.
 */
public final class Registration implements AutoCloseable {
    private final DeviceMemory memory;
    private final long handle;
    private final String holder;
    private final Consumer<Registration> deregister;
    private final AtomicBoolean closed = new AtomicBoolean();

    Registration(DeviceMemory memory, long handle, String holder, Consumer<Registration> deregister) {
        this.memory = memory;
        this.handle = handle;
        this.holder = holder;
        this.deregister = deregister;
    }

    /** {@return the registered memory} */
    public DeviceMemory memory() {
        return memory;
    }

    /** {@return whether this registration was closed (by its own close or its communicator's)} */
    public boolean isClosed() {
        return closed.get();
    }

    long handle() {
        return handle;
    }

    String holder() {
        return holder;
    }

    /**
     * Deregisters the memory (nothing native once the communicator was aborted or closed, which
     * dropped its registrations) and lets it be closed again. Idempotent.
     */
    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            try {
                deregister.accept(this);
            } finally {
                Pins.unpin(memory, holder);
            }
        }
    }

    /** Marks the registration closed without a native call (its communicator deregistered it). */
    void dropped() {
        if (closed.compareAndSet(false, true)) {
            Pins.unpin(memory, holder);
        }
    }

    @Override
    public String toString() {
        return "Registration[" + memory + " with " + holder + (closed.get() ? ", closed" : "") + "]";
    }
}
