package dev.jnccl;

import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.internal.NcclComm;
import dev.jnccl.internal.NcclTypes;
import java.util.List;

/**
 * Enqueues a transaction's commands into NCCL on the comms stream, for one {@link Communicator}
 * (which holds its lock meanwhile). The transports a subclass may replace (all-gather, send,
 * receive, all-to-all) go through the communicator's protected hooks; their NCCL defaults are here.
 */
final class CommandRunner {
    private final Communicator communicator;
    private final NcclComm comm;
    private final CudaStream stream;
    private final LoadedLibraries libraries;
    private final int rank;
    private final int worldSize;

    CommandRunner(Communicator communicator, NcclComm comm, CudaStream stream, LoadedLibraries libraries) {
        this.communicator = communicator;
        this.comm = comm;
        this.stream = stream;
        this.libraries = libraries;
        this.rank = communicator.rank();
        this.worldSize = communicator.worldSize();
    }

    static long bytes(List<Command> commands) {
        long total = 0;
        for (Command command : commands) {
            total += command.bytes();
        }
        return total;
    }

    /**
     * The commands as one NCCL group, then each all-to-all in command order: a plain one as its own
     * group, a destructive one as its ordered rounds. Apart from the transaction's sends and
     * receives, an all-to-all (which is point-to-point traffic too, in NCCL's ncclAlltoAll or in
     * the send/recv fallback) can never be paired with them, whatever order the ranks added them in.
     */
    void run(List<Command> commands) {
        boolean grouped = false;
        for (Command command : commands) {
            if (!(command instanceof Command.DestructiveAllToAll || command instanceof Command.AllToAll)) {
                grouped = true;
                break;
            }
        }
        if (grouped) {
            comm.group(() -> {
                for (Command command : commands) {
                    switch (command) {
                        case Command.Gather gather -> communicator.gatherWeight(gather);
                        case Command.ScatterReduce scatter -> scatterReduce(scatter);
                        case Command.Send send -> communicator.send(send);
                        case Command.Recv recv -> communicator.recv(recv);
                        case Command.Broadcast broadcast -> comm.broadcast(broadcast.tensor(), broadcast.root(), stream);
                        case Command.AllReduce allReduce -> comm.allReduce(allReduce.tensor(), ncclOp(allReduce.op()),
                                stream);
                        case Command.AllToAll ignored -> { } // own group below
                        case Command.DestructiveAllToAll ignored -> { } // ordered rounds below
                    }
                }
            });
        }
        for (Command command : commands) {
            if (command instanceof Command.AllToAll allToAll) {
                comm.group(() -> communicator.allToAll(allToAll));
            } else if (command instanceof Command.DestructiveAllToAll allToAll) {
                runAllToAll(allToAll.tensor());
            }
        }
    }

    private void runAllToAll(DeviceTensor tensor) {
        for (AllToAllSchedule.Round round : AllToAllSchedule.rounds(rank, worldSize)) {
            DeviceTensor sendSlot = tensor.shard(round.sendSlot(), worldSize);
            DeviceTensor recvSlot = tensor.shard(round.recvSlot(), worldSize);
            // Always NCCL (never an overridden transport): the rounds' order is what makes it safe.
            comm.group(() -> {
                comm.send(sendSlot, round.sendPeer(), stream);
                comm.recv(recvSlot, round.recvPeer(), stream);
            });
        }
    }

    private void scatterReduce(Command.ScatterReduce scatter) {
        DeviceTensor tensor = scatter.tensor();
        DeviceTensor shard = tensor.shard(rank, worldSize);
        // In place in NCCL's sense: the receive buffer is this rank's shard of the send buffer.
        comm.reduceScatter(tensor, shard, ncclOp(scatter.op()), stream);
    }

    /** NCCL's all-gather: the default of {@link Communicator#gatherWeight}. */
    void allGather(Command.Gather gather) {
        comm.allGather(gather.shard(), gather.full(), stream);
    }

    /** NCCL's send: the default of {@link Communicator#send}. */
    void send(Command.Send send) {
        comm.send(send.tensor(), send.peer(), stream);
    }

    /** NCCL's receive: the default of {@link Communicator#recv}. */
    void recv(Command.Recv recv) {
        comm.recv(recv.tensor(), recv.peer(), stream);
    }

    /** NCCL's all-to-all, or sends and receives where it has none: the default of {@link Communicator#allToAll}. */
    void allToAll(Command.AllToAll allToAll) {
        if (libraries.supports(NcclFeature.ALL_TO_ALL)) {
            comm.allToAll(allToAll.send(), allToAll.recv(), allToAll.send().count() / worldSize, stream);
        } else {
            allToAllBySendRecv(allToAll);
        }
    }

    /** The all-to-all as a send and a receive of one slot per rank, in the open NCCL group (NCCL before 2.28). */
    void allToAllBySendRecv(Command.AllToAll allToAll) {
        for (int peer = 0; peer < worldSize; peer++) {
            comm.send(allToAll.send().shard(peer, worldSize), peer, stream);
            comm.recv(allToAll.recv().shard(peer, worldSize), peer, stream);
        }
    }

    /**
     * The ncclRedOp_t for {@code op}. With one rank the average is the sum (bit for bit: NCCL
     * multiplies by 1/1), and NCCL 2.28 refuses ncclAvg on FP8 for a single rank, so SUM is issued.
     */
    private int ncclOp(ReduceOp op) {
        return NcclTypes.of(op == ReduceOp.AVG && worldSize == 1 ? ReduceOp.SUM : op);
    }
}
