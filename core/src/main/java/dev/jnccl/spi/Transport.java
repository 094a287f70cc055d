package dev.jnccl.spi;

import dev.jnccl.cuda.CudaStream;
import java.util.List;

/**
 * How the commands of a transaction move between ranks. The communicator enqueues a transaction
 * inside one NCCL group on its comms stream and offers each command to the transport first; what
 * the transport does not take moves through NCCL. Threads mode's copy-engine transport takes the
 * all-gathers, sends, receives and all-to-alls and copies between devices instead.
 *
 * <p>Calls come from the thread executing the transaction, holding the communicator's lock, in
 * this order: {@link #beforeCommands}, {@link #enqueue} per command, {@link #afterCommands} (not
 * after a failure).
 */
public interface Transport {

    /** The transport that takes nothing: every command moves through NCCL. */
    Transport NCCL = (command, stream) -> false;

    /**
     * Called after the comms stream has waited for the transaction's ready event and before any
     * command is enqueued.
     *
     * @param commands the transaction's commands, in order (read-only, and valid only until the
     *                 transaction's {@link #afterCommands}: the communicator reuses the list for its
     *                 next transaction, so a transport that keeps or shares the commands copies them)
     * @param stream   the comms stream
     */
    default void beforeCommands(List<Command> commands, CudaStream stream) {}

    /**
     * Offers one command; a kind of {@link Command.Group#ROUNDS} (the destructive all-to-all, whose
     * rounds' order is what makes it safe) is never offered. A transport declines every kind it does
     * not move, so that a new kind goes to NCCL without touching it.
     *
     * @param command the command
     * @param stream  the comms stream
     * @return true when this transport enqueued it, false to let NCCL move it
     */
    boolean enqueue(Command command, CudaStream stream);

    /**
     * Called after the commands were enqueued and right before the transaction's signal is recorded
     * on the comms stream: the place to make the comms stream wait for the peers.
     *
     * @param stream the comms stream
     */
    default void afterCommands(CudaStream stream) {}

    /** Called once by {@link dev.jnccl.Communicator#close()}, before the parts' {@link RankEvents#closed}. */
    default void close() {}
}
