package dev.jnccl;

import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.internal.Pins;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The memory registered with one communicator (ncclCommRegister): what its close deregisters, and
 * the pins that keep that memory from being freed meanwhile. Changes under the native lock.
 */
final class Registrations {
    private final Communicator face;
    private final ReentrantLock lock;
    private final NcclComm comm;
    /** Not yet closed; the communicator's close drops them. */
    private final Set<Registration> live = new HashSet<>();

    Registrations(Communicator face, ReentrantLock lock, NcclComm comm) {
        this.face = face;
        this.lock = lock;
        this.comm = comm;
    }

    /** See {@link Communicator#register}: the memory's checks were made by the caller. */
    Registration register(DeviceMemory memory) {
        String holder = "the communicator of rank " + face.rank() + " of " + face.worldSize() + " (device "
                + face.device() + ")";
        lock.lock();
        try {
            face.requireUsable("register");
            if (!Pins.pin(memory, holder, memory::isClosed)) {
                throw new IllegalStateException("register: " + memory + " is closed");
            }
            long handle;
            try {
                handle = comm.register(memory.address(), memory.bytes());
            } catch (RuntimeException e) {
                Pins.unpin(memory, holder);
                throw e;
            }
            Registration registration = new Registration(memory, handle, holder, this::deregister);
            live.add(registration);
            return registration;
        } finally {
            lock.unlock();
        }
    }

    /** A registration's close: ncclCommDeregister while the communicator is open, nothing after. */
    private void deregister(Registration registration) {
        lock.lock();
        try {
            if (live.remove(registration) && !face.isAborted() && !face.isClosed()) {
                comm.deregister(registration.handle());
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * After the communicator's finalize (which deregistered them) or its abort (which took them
     * along): the memory may be freed now. The caller holds the native lock.
     */
    void dropAll() {
        for (Registration registration : List.copyOf(live)) {
            registration.dropped();
        }
        live.clear();
    }
}
