package dev.jnccl;

import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.VersionCodes;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.spi.Command;
import dev.jnccl.spi.Command.Function;
import dev.jnccl.spi.Command.Group;
import dev.jnccl.spi.Command.Kind;
import dev.jnccl.spi.Transport;
import java.util.List;

/**
 * Enqueues a transaction's commands on the comms stream, for one {@link Communicator} (which holds
 * its lock meanwhile), as each command's {@link Kind} row says: its {@link Group} decides the NCCL
 * group it runs in; each command is offered to the launcher's {@link Transport} first, and what it
 * does not take goes into NCCL here: one NCCL call of the kind's function (through
 * {@link NcclComm#call}, the table from kind to function) with the buffers as NCCL takes them, or,
 * for the kinds NCCL has no one function for (or the loaded NCCL lacks), their sends, receives or
 * broadcasts.
 */
final class CommandRunner {
    private final NcclComm comm;
    private final CudaStream stream;
    private final LoadedLibraries libraries;
    private final Transport transport;
    private final int rank;
    private final int worldSize;
    /**
     * Tests only: the all-to-all, gather and scatter as sends and receives, the path of an NCCL
     * without ncclAlltoAll, ncclGather and ncclScatter.
     */
    private boolean allToAllBySendRecv;
    /** The first NCCL whose single-rank scaled sum covers every element (see {@link #oneRankPreMulSumCovers}). */
    private static final int ONE_RANK_TAIL_FIXED = VersionCodes.of(2, 30, 0);
    /** Whether scaled sums need their tail split off: one rank on an NCCL before {@link #ONE_RANK_TAIL_FIXED}. */
    private final boolean oneRankTailSplit;
    /** The commands {@link #run} is enqueuing (read by the group bodies below), null between runs. */
    private List<Command> running;
    /** The command of {@link #ownGroupBody}. */
    private int runningIndex;
    /** {@link #runGrouped} as the group body, made once. */
    private final Runnable groupedBody = this::runGrouped;
    /** {@link #runOwnGroup} as the group body, made once. */
    private final Runnable ownGroupBody = this::runOwnGroup;
    /** The destructive all-to-all's rounds for this rank, made once. */
    private final List<AllToAllSchedule.Round> rounds;
    /** The destructive all-to-all {@link #runRound} enqueues a round of, null between runs. */
    private DeviceTensor roundTensor;
    /** The round {@link #runRound} enqueues. */
    private AllToAllSchedule.Round round;
    /** {@link #runRound} as the group body, made once. */
    private final Runnable roundBody = this::runRound;

    CommandRunner(NcclComm comm, CudaStream stream, LoadedLibraries libraries, Transport transport, int rank,
                  int worldSize) {
        this.comm = comm;
        this.stream = stream;
        this.libraries = libraries;
        this.transport = transport;
        this.rank = rank;
        this.worldSize = worldSize;
        this.oneRankTailSplit = worldSize == 1 && libraries.ncclVersion() < ONE_RANK_TAIL_FIXED;
        this.rounds = AllToAllSchedule.rounds(rank, worldSize);
    }

    void forceAllToAllBySendRecv() {
        allToAllBySendRecv = true;
    }

    static long bytes(List<Command> commands) {
        long total = 0;
        for (int i = 0; i < commands.size(); i++) {
            total += commands.get(i).bytes();
        }
        return total;
    }

    /**
     * The commands of {@link Group#TRANSACTION} as one NCCL group, then the others in command
     * order: each of {@link Group#OWN} as a group of its own, each of {@link Group#ROUNDS} as its
     * ordered rounds. Point-to-point traffic underneath a collective (NCCL's all-to-all, gather and
     * scatter, or the sends and receives standing in for them) can so never pair with the
     * transaction's own sends and receives, whatever order the ranks added them in.
     */
    void run(List<Command> commands) {
        // Indexed loops and preallocated group bodies: the hot path allocates no iterator or lambda.
        running = commands;
        try {
            for (int i = 0; i < commands.size(); i++) {
                if (commands.get(i).kind().group() == Group.TRANSACTION) {
                    comm.group(groupedBody);
                    break;
                }
            }
            for (int i = 0; i < commands.size(); i++) {
                Command command = commands.get(i);
                switch (command.kind().group()) {
                    case OWN -> {
                        runningIndex = i;
                        comm.group(ownGroupBody);
                    }
                    case ROUNDS -> runAllToAll(command.src());
                    case TRANSACTION -> { }
                }
            }
        } finally {
            running = null;
        }
    }

    /** The body of the transaction's one group: every command of {@link Group#TRANSACTION}. */
    private void runGrouped() {
        List<Command> commands = running;
        for (int i = 0; i < commands.size(); i++) {
            Command command = commands.get(i);
            if (command.kind().group() == Group.TRANSACTION) {
                enqueue(command);
            }
        }
    }

    /** The body of a group of its own: command {@link #runningIndex}. */
    private void runOwnGroup() {
        enqueue(running.get(runningIndex));
    }

    /** One command, inside the open group: the transport's, or NCCL's. */
    private void enqueue(Command command) {
        if (transport.enqueue(command, stream)) {
            return;
        }
        Kind kind = command.kind();
        switch (kind) {
            case ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, REDUCE, SEND, RECV -> direct(command);
            case GATHER, SCATTER, ALL_TO_ALL -> {
                if (libraries.supports(kind.function().feature()) && !allToAllBySendRecv) {
                    direct(command);
                } else {
                    bySendRecv(command); // an NCCL before the function's feature
                }
            }
            case UNEVEN_ALL_TO_ALL -> bySendRecv(command);
            case ALL_GATHER_V -> byBroadcasts(command);
            case DESTRUCTIVE_ALL_TO_ALL -> throw new IllegalStateException(
                    "a destructive all-to-all runs in rounds, not in a group: " + command);
        }
    }

    /**
     * The command as the one NCCL call of its kind, its buffers as NCCL takes them: in place, the
     * receive buffer is this rank's slot of the send buffer (scattered) or the same buffer; counts
     * are per rank where NCCL's are; a buffer only the root uses is 0 elsewhere.
     */
    private void direct(Command command) {
        Kind kind = command.kind();
        DeviceTensor src = command.src();
        DeviceTensor dst = command.dst();
        long count = switch (kind.shape()) {
            case SCATTERED -> dst != null && dst != src ? dst.count() : src.count() / worldSize;
            case EXCHANGED -> src.count() / worldSize;
            case ONE, SAME, GATHERED, COUNTED, BLOCKS -> (src != null ? src : dst).count();
        };
        long send = src == null ? 0 : src.address();
        long recv = dst == null ? 0 : dst.address();
        if (kind.shape() == Command.Shape.SCATTERED && dst == src) { // one tensor: this rank's slot receives
            recv += rank * count * src.dtype().size();
        }
        int op = kind.reduces() ? ncclOp(command.op(), command.dtype()) : 0;
        int target = kind.role() == Command.Role.PEER ? command.peer() : Math.max(command.root(), 0);
        comm.call(kind.function(), send, recv, count, command.dtype(), op, target, stream);
        if (oneRankTailSplit && kind.reduces() && command.op().kind() == ReduceOp.Kind.SCALED_SUM) {
            scaledSumTail(send, recv, count, command.dtype(), op);
        }
    }

    /**
     * NCCL's single-rank scaled sum (before 2.30) leaves a tail (see {@link #oneRankPreMulSumCovers}):
     * that tail as an all-reduce of its own, in the same group and on the same stream. On one rank
     * NCCL runs every reduction (all-reduce, reduce-scatter, reduce) as the same copy-and-scale of
     * the send buffer into the receive buffer, so the result is what a correct NCCL gives.
     */
    private void scaledSumTail(long send, long recv, long count, DType dtype, int op) {
        long covered = oneRankPreMulSumCovers(count, dtype.size());
        if (covered < count) {
            long skip = covered * dtype.size();
            comm.call(Function.ALL_REDUCE, send + skip, recv + skip, count - covered, dtype, op, 0, stream);
        }
    }

    /**
     * A point-to-point collective as a send and a receive per rank with a non-empty block, in the
     * open group, addressed in place: the uneven all-to-all always, the all-to-all, gather and
     * scatter where the loaded NCCL has no function for them. A rank's block to or from itself is
     * skipped where it already is in place.
     */
    private void bySendRecv(Command command) {
        DeviceTensor src = command.src();
        DeviceTensor dst = command.dst();
        DType dtype = command.dtype();
        long size = dtype.size();
        // Each block starts where the one before ended; a rank's blocks of the rooted kinds are
        // empty where it sends or receives nothing, so the root's blocks land at their slots.
        long sendAt = src == null ? 0 : src.address();
        long recvAt = dst == null ? 0 : dst.address();
        for (int peer = 0; peer < worldSize; peer++) {
            long out = sendCount(command, peer);
            long in = recvCount(command, peer);
            boolean inPlace = peer == rank && out > 0 && sendAt == recvAt;
            if (out > 0 && !inPlace) {
                comm.call(Function.SEND, sendAt, 0, out, dtype, 0, peer, stream);
            }
            if (in > 0 && !inPlace) {
                comm.call(Function.RECV, 0, recvAt, in, dtype, 0, peer, stream);
            }
            sendAt += out * size;
            recvAt += in * size;
        }
    }

    /** Elements this rank sends to {@code peer} in {@link #bySendRecv}. */
    private long sendCount(Command command, int peer) {
        DeviceTensor src = command.src();
        return switch (command.kind()) {
            case GATHER -> peer == command.root() ? src.count() : 0;
            case SCATTER -> rank == command.root() ? command.dst().count() : 0;
            case UNEVEN_ALL_TO_ALL -> command.sendCount(peer);
            case ALL_TO_ALL -> src.count() / worldSize; // a slot per rank
            case ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, REDUCE, ALL_GATHER_V, DESTRUCTIVE_ALL_TO_ALL, SEND,
                 RECV -> throw notPointToPoint(command);
        };
    }

    /** Elements this rank receives from {@code peer} in {@link #bySendRecv}. */
    private long recvCount(Command command, int peer) {
        return switch (command.kind()) {
            case GATHER -> rank == command.root() ? command.src().count() : 0;
            case SCATTER -> peer == command.root() ? command.dst().count() : 0;
            case UNEVEN_ALL_TO_ALL -> command.recvCount(peer);
            case ALL_TO_ALL -> command.dst().count() / worldSize;
            case ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, REDUCE, ALL_GATHER_V, DESTRUCTIVE_ALL_TO_ALL, SEND,
                 RECV -> throw notPointToPoint(command);
        };
    }

    private static IllegalStateException notPointToPoint(Command command) {
        return new IllegalStateException("not run as sends and receives: " + command);
    }

    /**
     * The uneven all-gather: one broadcast per rank with a non-empty block, from that rank into its
     * block of every rank's destination, in the open group (as Megatron and vLLM build it on NCCL).
     */
    private void byBroadcasts(Command command) {
        DeviceTensor dst = command.dst();
        DType dtype = command.dtype();
        long blockAt = dst.address();
        for (int root = 0; root < worldSize; root++) {
            long count = command.recvCount(root);
            if (count > 0) {
                long send = root == rank ? command.src().address() : blockAt;
                comm.call(Function.BROADCAST, send, blockAt, count, dtype, 0, root, stream);
            }
            blockAt += count * dtype.size();
        }
    }

    private void runAllToAll(DeviceTensor tensor) {
        roundTensor = tensor;
        try {
            for (int i = 0; i < rounds.size(); i++) {
                round = rounds.get(i);
                // Always NCCL (never an overridden transport): the rounds' order is what makes it safe.
                comm.group(roundBody);
            }
        } finally {
            roundTensor = null;
            round = null;
        }
    }

    /** The body of one round's group: {@link #round} of the destructive all-to-all of {@link #roundTensor}. */
    private void runRound() {
        DeviceTensor tensor = roundTensor;
        long slotCount = tensor.count() / worldSize;
        long slotBytes = slotCount * tensor.dtype().size();
        comm.call(Function.SEND, tensor.address() + round.sendSlot() * slotBytes, 0, slotCount, tensor.dtype(), 0,
                round.sendPeer(), stream);
        comm.call(Function.RECV, 0, tensor.address() + round.recvSlot() * slotBytes, slotCount, tensor.dtype(), 0,
                round.recvPeer(), stream);
    }

    /**
     * NCCL before 2.30 runs a reduction with a pre-multiplied sum on a single rank as one kernel
     * (src/device/onerank.cu) whose blocks each take {@code count / blocks} elements rounded <em>down</em>
     * before the 16-byte alignment, so up to {@code blocks - 1} (at most 31) elements at the end are
     * neither scaled nor written; NCCL 2.30 rounds up. Returns how many leading elements that kernel
     * covers for {@code count} elements of {@code elementSize} bytes: the rest needs a call of its
     * own, which fits one block (at most 31 elements, under 16 KiB) and is covered whole.
     */
    static long oneRankPreMulSumCovers(long count, int elementSize) {
        long perPack = 16 / elementSize;
        long blocks = Math.min(32, Math.ceilDiv(count * elementSize, 16 << 10));
        if (blocks <= 1) {
            return count;
        }
        long perBlock = Math.ceilDiv(count / blocks, perPack) * perPack;
        return Math.min(count, blocks * perBlock);
    }

    /**
     * The ncclRedOp_t for {@code op} on {@code dtype} tensors: the one conversion every reducing
     * command goes through. With one rank the average is the sum (bit for bit: NCCL multiplies by
     * 1/1), and NCCL 2.28 refuses ncclAvg on FP8 for a single rank, so SUM is issued. A scaled sum
     * is the communicator's pre-multiplied sum operator for that type and factor (made at its
     * first use, inside the open group: creating one is local and enqueues nothing).
     */
    private int ncclOp(ReduceOp op, DType dtype) {
        if (op.kind() == ReduceOp.Kind.SCALED_SUM) {
            return comm.preMulSum(dtype, op.factor());
        }
        return NcclTypes.of(op == ReduceOp.AVG && worldSize == 1 ? ReduceOp.SUM : op);
    }
}
