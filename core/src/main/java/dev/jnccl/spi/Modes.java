package dev.jnccl.spi;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.UniqueId;
import java.util.Objects;

/**
 * Makes communicators from a launcher's parts: the one way a mode module creates a
 * {@link Communicator} (which is final and has no public constructor).
 */
public final class Modes {
    /**
     * The constructor of {@link Communicator}, handed over by its class when it is initialized (the
     * JDK's shared-secrets pattern: the class stays final and closed to users, and this package,
     * exported to the launchers only, is the one way in).
     */
    public interface Factory {
        /**
         * See {@link Modes#communicator}.
         *
         * @param id        the unique id every rank uses
         * @param rank      this rank
         * @param worldSize the number of ranks
         * @param device    the CUDA device
         * @param options   deadlines and diagnostics
         * @param parts     the launcher's parts
         * @return the communicator
         */
        Communicator create(UniqueId id, int rank, int worldSize, int device, CommunicatorOptions options,
                            RankParts parts);
    }

    private static volatile Factory factory;

    private Modes() {}

    /**
     * Called once by {@link Communicator}'s class initializer.
     *
     * @param communicators the factory
     * @throws IllegalStateException on any later call
     */
    public static synchronized void install(Factory communicators) {
        if (factory != null) {
            throw new IllegalStateException("Modes.install: the communicator factory is installed once, by Communicator");
        }
        factory = Objects.requireNonNull(communicators, "Modes.install: factory is null");
    }

    /**
     * Creates this rank's communicator on {@code device} (made the calling thread's current device)
     * and waits, up to {@link CommunicatorOptions#initTimeout()}, for all ranks to join; the wait
     * also ends as soon as {@link Failures#cancellation()} of the parts gives a reason.
     *
     * @param id        the unique id every rank of the communicator uses
     * @param rank      this rank, in {@code [0, worldSize)}
     * @param worldSize the number of ranks
     * @param device    the CUDA device of this rank
     * @param options   deadlines and diagnostics
     * @param parts     the launcher's host side and transport
     * @return the communicator, ready to use
     * @throws IllegalArgumentException                for a bad rank, world size or device, before any native call
     * @throws dev.jnccl.NcclException                 when NCCL refuses the communicator
     * @throws dev.jnccl.CommunicatorAbortedException  when the other ranks did not join in time
     */
    public static Communicator communicator(UniqueId id, int rank, int worldSize, int device,
                                            CommunicatorOptions options, RankParts parts) {
        Factory installed = factory;
        if (installed == null) {
            try { // Communicator's class initializer installs the factory
                Class.forName(Communicator.class.getName(), true, Communicator.class.getClassLoader());
            } catch (ClassNotFoundException e) {
                throw new IllegalStateException(e);
            }
            installed = factory;
        }
        return installed.create(id, rank, worldSize, device, options, parts);
    }
}
