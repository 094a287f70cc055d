package dev.jnccl;

import dev.jnccl.bindings.LoadedLibraries;
import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.bindings.VersionCodes;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.spi.Command;
import dev.jnccl.spi.Transport;
import java.util.List;

/**
 * Enqueues a transaction's commands on the comms stream, for one {@link Communicator} (which holds
 * its lock meanwhile): each command is offered to the launcher's {@link Transport} first, and what
 * it does not take goes into NCCL here.
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
     * After a reducing command with a scaled sum on one rank, where the loaded NCCL leaves a tail
     * (see {@link #oneRankPreMulSumCovers}): that tail as an all-reduce of its own, in the same group
     * and on the same stream. On one rank NCCL runs every reduction (all-reduce, reduce-scatter,
     * reduce) as the same copy-and-scale of {@code src} into {@code dst}, and the first call left the
     * tail untouched, so the result is what a correct NCCL gives, element for element.
     */
    private void oneRankScaledSumTail(Command command) {
        switch (command) {
            case Command.AllReduce a -> scaledSumTail(a.tensor(), a.tensor(), a.op());
            case Command.ReduceScatter r -> scaledSumTail(r.tensor(), r.tensor(), r.op());
            case Command.AllReduceOutOfPlace a -> scaledSumTail(a.src(), a.dst(), a.op());
            case Command.ReduceScatterOutOfPlace r -> scaledSumTail(r.src(), r.dst(), r.op());
            case Command.Reduce r -> scaledSumTail(r.src(), r.dst(), r.op());
            default -> { }
        }
    }

    private void scaledSumTail(DeviceTensor src, DeviceTensor dst, ReduceOp op) {
        if (op.kind() != ReduceOp.Kind.SCALED_SUM) {
            return;
        }
        long count = dst.count();
        long covered = oneRankPreMulSumCovers(count, dst.dtype().size());
        if (covered < count) {
            comm.allReduce(src.slice(covered, count - covered), dst.slice(covered, count - covered),
                    ncclOp(op, dst.dtype()), stream);
        }
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
     * The commands as one NCCL group, then each all-to-all (and each other collective NCCL runs as
     * point-to-point traffic: gather, scatter, the uneven all-to-all) in command order: a plain one
     * as its own group, a destructive one as its ordered rounds. Apart from the transaction's sends
     * and receives, such a collective (point-to-point traffic in NCCL's ncclAlltoAll, ncclGather
     * and ncclScatter, or in the send/recv fallbacks) can never be paired with them, whatever order
     * the ranks added them in.
     */
    void run(List<Command> commands) {
        // Indexed loops and preallocated group bodies: the hot path allocates no iterator or lambda.
        boolean grouped = false;
        for (int i = 0; i < commands.size(); i++) {
            Command command = commands.get(i);
            if (!(command instanceof Command.DestructiveAllToAll || isOwnGroup(command))) {
                grouped = true;
                break;
            }
        }
        if (grouped) {
            running = commands;
            try {
                comm.group(groupedBody);
            } finally {
                running = null;
            }
        }
        for (int i = 0; i < commands.size(); i++) {
            Command command = commands.get(i);
            if (isOwnGroup(command)) {
                running = commands;
                runningIndex = i;
                try {
                    comm.group(ownGroupBody);
                } finally {
                    running = null;
                }
            } else if (command instanceof Command.DestructiveAllToAll allToAll) {
                runAllToAll(allToAll.tensor()); // always NCCL: the rounds' order is what makes it safe
            }
        }
    }

    /** The body of the transaction's one group: every command that runs in it. */
    private void runGrouped() {
        List<Command> commands = running;
        for (int i = 0; i < commands.size(); i++) {
            Command command = commands.get(i);
            if (!(isOwnGroup(command) || command instanceof Command.DestructiveAllToAll)
                    && !transport.enqueue(command, stream)) {
                nccl(command);
            }
        }
    }

    /** The body of a group of its own: command {@link #runningIndex}. */
    private void runOwnGroup() {
        Command command = running.get(runningIndex);
        if (!transport.enqueue(command, stream)) {
            nccl(command);
        }
    }

    /** The collectives that are point-to-point traffic underneath, each run in a group of its own. */
    private static boolean isOwnGroup(Command command) {
        return command instanceof Command.AllToAll || command instanceof Command.UnevenAllToAll
                || command instanceof Command.Gather || command instanceof Command.Scatter;
    }

    /** One command into NCCL, inside the open group. */
    private void nccl(Command command) {
        ncclCall(command);
        if (oneRankTailSplit) {
            oneRankScaledSumTail(command);
        }
    }

    private void ncclCall(Command command) {
        switch (command) {
            case Command.AllGather gather -> comm.allGather(gather.shard(), gather.full(), stream);
            // In place in NCCL's sense: the receive buffer is this rank's shard of the send buffer.
            case Command.ReduceScatter scatter -> comm.reduceScatterInPlace(scatter.tensor(),
                    ncclOp(scatter.op(), scatter.tensor().dtype()), stream);
            case Command.AllReduce allReduce -> comm.allReduce(allReduce.tensor(),
                    ncclOp(allReduce.op(), allReduce.tensor().dtype()), stream);
            case Command.Broadcast broadcast -> comm.broadcast(broadcast.tensor(), broadcast.root(), stream);
            case Command.Send send -> comm.send(send.tensor(), send.peer(), stream);
            case Command.Recv recv -> comm.recv(recv.tensor(), recv.peer(), stream);
            case Command.AllToAll allToAll -> allToAll(allToAll);
            case Command.AllReduceOutOfPlace a ->
                    comm.allReduce(a.src(), a.dst(), ncclOp(a.op(), a.src().dtype()), stream);
            case Command.ReduceScatterOutOfPlace r ->
                    comm.reduceScatter(r.src(), r.dst(), ncclOp(r.op(), r.src().dtype()), stream);
            case Command.BroadcastOutOfPlace b -> comm.broadcast(b.src(), b.dst(), b.root(), stream);
            case Command.Reduce r -> comm.reduce(r.src(), r.dst(), ncclOp(r.op(), r.src().dtype()), r.root(), stream);
            case Command.Gather gather -> gather(gather);
            case Command.Scatter scatter -> scatter(scatter);
            case Command.UnevenAllToAll allToAll -> unevenAllToAll(allToAll);
            case Command.DestructiveAllToAll allToAll -> throw new IllegalStateException(
                    "a destructive all-to-all runs in rounds, not in a group: " + allToAll);
        }
    }

    /** The uneven all-to-all as a send and a receive per rank with a non-empty block, addressed in place. */
    private void unevenAllToAll(Command.UnevenAllToAll allToAll) {
        DeviceTensor send = allToAll.send();
        DeviceTensor recv = allToAll.recv();
        long elementSize = send.dtype().size();
        long sendAt = send.address();
        long recvAt = recv.address();
        for (int peer = 0; peer < worldSize; peer++) {
            long out = allToAll.sendCount(peer);
            long in = allToAll.recvCount(peer);
            if (out > 0) {
                comm.send(sendAt, out, send.dtype(), peer, stream);
            }
            if (in > 0) {
                comm.recv(recvAt, in, recv.dtype(), peer, stream);
            }
            sendAt += out * elementSize;
            recvAt += in * elementSize;
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
        comm.send(tensor.address() + round.sendSlot() * slotBytes, slotCount, tensor.dtype(), round.sendPeer(), stream);
        comm.recv(tensor.address() + round.recvSlot() * slotBytes, slotCount, tensor.dtype(), round.recvPeer(), stream);
    }

    /** NCCL's all-to-all, or a send and a receive per rank where the loaded NCCL has none. */
    private void allToAll(Command.AllToAll allToAll) {
        if (libraries.supports(NcclFeature.ALL_TO_ALL) && !allToAllBySendRecv) {
            comm.allToAll(allToAll.send(), allToAll.recv(), allToAll.send().count() / worldSize, stream);
        } else {
            allToAllBySendRecv(allToAll);
        }
    }

    /** NCCL's gather, or a send to the root and, on the root, a receive per rank (NCCL before 2.28). */
    private void gather(Command.Gather gather) {
        if (libraries.supports(NcclFeature.GATHER) && !allToAllBySendRecv) {
            comm.gather(gather.src(), gather.dst(), gather.root(), stream);
            return;
        }
        DeviceTensor src = gather.src();
        boolean root = rank == gather.root();
        DeviceTensor own = root ? gather.dst().shard(rank, worldSize) : null;
        if (!root || own.address() != src.address()) { // in place the root's own slot is already there
            comm.send(src, gather.root(), stream);
        }
        for (int peer = 0; root && peer < worldSize; peer++) {
            if (peer != rank || own.address() != src.address()) {
                comm.recv(gather.dst().shard(peer, worldSize), peer, stream);
            }
        }
    }

    /** NCCL's scatter, or, on the root, a send per rank and a receive from the root (NCCL before 2.28). */
    private void scatter(Command.Scatter scatter) {
        if (libraries.supports(NcclFeature.SCATTER) && !allToAllBySendRecv) {
            comm.scatter(scatter.src(), scatter.dst(), scatter.root(), stream);
            return;
        }
        DeviceTensor dst = scatter.dst();
        boolean root = rank == scatter.root();
        boolean inPlace = root && scatter.src().shard(rank, worldSize).address() == dst.address();
        for (int peer = 0; root && peer < worldSize; peer++) {
            if (peer != rank || !inPlace) {
                comm.send(scatter.src().shard(peer, worldSize), peer, stream);
            }
        }
        if (!inPlace) {
            comm.recv(dst, scatter.root(), stream);
        }
    }

    /** The all-to-all as a send and a receive of one slot per rank, in the open NCCL group (NCCL before 2.28). */
    private void allToAllBySendRecv(Command.AllToAll allToAll) {
        for (int peer = 0; peer < worldSize; peer++) {
            comm.send(allToAll.send().shard(peer, worldSize), peer, stream);
            comm.recv(allToAll.recv().shard(peer, worldSize), peer, stream);
        }
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
