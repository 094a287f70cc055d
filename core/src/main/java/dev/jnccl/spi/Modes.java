package dev.jnccl.spi;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.GrowTicket;
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

    /** The new rank of a grow, handed over by {@link Communicator}'s class initializer as {@link Factory} is. */
    public interface Joiner {
        /**
         * See {@link Modes#joinGrow}.
         *
         * @param ticket  the grow's ticket
         * @param rank    this rank among the added ones
         * @param device  the CUDA device
         * @param options deadlines and diagnostics
         * @param parts   the launcher's parts
         * @return the communicator
         */
        Communicator join(GrowTicket ticket, int rank, int device, CommunicatorOptions options, RankParts parts);
    }

    private static volatile Factory factory;
    private static volatile Joiner joiner;

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
     * Called once by {@link Communicator}'s class initializer.
     *
     * @param joins the new ranks' factory
     * @throws IllegalStateException on any later call
     */
    public static synchronized void installJoin(Joiner joins) {
        if (joiner != null) {
            throw new IllegalStateException("Modes.installJoin: the grow's factory is installed once, by Communicator");
        }
        joiner = Objects.requireNonNull(joins, "Modes.installJoin: joiner is null");
    }

    /**
     * A new rank of a grow with the launcher's parts (the launcher's host side of the grown world,
     * the same world its existing ranks' {@link HostSide#grow} gives): rank {@code rank} of
     * {@code ticket.toWorld()}, waiting up to {@link CommunicatorOptions#initTimeout()} for every
     * rank; see {@link Communicator#joinGrow}.
     *
     * @param ticket  the ticket the existing ranks made
     * @param rank    this rank, in {@code [ticket.fromWorld(), ticket.toWorld())}
     * @param device  the CUDA device of this rank
     * @param options deadlines and diagnostics
     * @param parts   the launcher's parts of the grown world for this rank
     * @return the communicator, ready to use
     */
    public static Communicator joinGrow(GrowTicket ticket, int rank, int device, CommunicatorOptions options,
                                        RankParts parts) {
        if (joiner == null) {
            loadCommunicator();
        }
        return joiner.join(ticket, rank, device, options, parts);
    }

    private static void loadCommunicator() {
        try { // Communicator's class initializer installs the factories
            Class.forName(Communicator.class.getName(), true, Communicator.class.getClassLoader());
        } catch (ClassNotFoundException e) {
            throw new IllegalStateException(e);
        }
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
            loadCommunicator();
            installed = factory;
        }
        return installed.create(id, rank, worldSize, device, options, parts);
    }
}
