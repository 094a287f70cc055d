package dev.jnccl.threads;

import dev.jnccl.Command;
import dev.jnccl.CommandBuffer;
import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.DeviceTensor;
import dev.jnccl.UniqueId;
import dev.jnccl.cuda.CudaEvent;
import java.util.ArrayList;
import java.util.List;

/**
 * One rank of a threads-mode pack: host-side collectives through the pack's shared state, the
 * launch-queue throttle, and the memcpy transports.
 *
 * <p>Memcpy transports are pulls: each rank copies what it receives from the peers' buffers on its
 * own comms stream. Order: (1) each rank's comms stream has waited for its ready event; it records
 * {@code readyForPeers} and publishes its commands; (2) after a barrier, each rank's comms stream
 * waits for every peer's {@code readyForPeers}, then enqueues its copies; (3) each rank records
 * {@code doneReading}; after a barrier, each comms stream waits for every peer's
 * {@code doneReading} before the signal is recorded. So a signal means: my receives are complete
 * AND every peer has finished reading my buffers. With memcpy transports every transaction is
 * collective over the pack: every rank executes the same number of transactions.
 *
 * <p>When the pack fails, the signals above may never be recorded, so each batch of copies is
 * followed by a record of {@code readsDone}, and a rank released by the failure (an aborted
 * communicator call, a released barrier or exchange, its own abort, its close) first waits for every
 * rank's {@code readsDone}: see {@link PackState}.
 */
final class ThreadsCommunicator extends Communicator {

    /** What a rank shows its peers for one transaction. */
    private record Published(int rank, List<Command> commands, CudaEvent readyForPeers, CudaEvent doneReading) {
        List<Command.Send> sendsTo(int peer) {
            List<Command.Send> sends = new ArrayList<>();
            for (Command command : commands) {
                if (command instanceof Command.Send send && send.peer() == peer) {
                    sends.add(send);
                }
            }
            return sends;
        }

        List<Command.Recv> recvsFrom(int peer) {
            List<Command.Recv> recvs = new ArrayList<>();
            for (Command command : commands) {
                if (command instanceof Command.Recv recv && recv.peer() == peer) {
                    recvs.add(recv);
                }
            }
            return recvs;
        }

        /** The all-to-alls, in command order (matched by position, apart from sends and receives, as on NCCL). */
        List<Command.AllToAll> allToAlls() {
            List<Command.AllToAll> allToAlls = new ArrayList<>();
            for (Command command : commands) {
                if (command instanceof Command.AllToAll allToAll) {
                    allToAlls.add(allToAll);
                }
            }
            return allToAlls;
        }

        List<Command.Gather> gathers() {
            List<Command.Gather> gathers = new ArrayList<>();
            for (Command command : commands) {
                if (command instanceof Command.Gather gather) {
                    gathers.add(gather);
                }
            }
            return gathers;
        }
    }

    private final PackState pack;
    private final ThreadsOptions options;
    private final CudaEvent readyForPeers;
    private final CudaEvent doneReading;
    private final CudaEvent readsDone;
    /** The rank's thread: an abort that happens on it releases user code that may free buffers. */
    private final Thread owner = Thread.currentThread();
    private long transactions;
    /** Splits made from this communicator so far: every rank counts the same (split is collective). */
    private long splits;
    private List<Published> published;
    private int gatherIndex;
    private int allToAllIndex;
    private int[] recvIndex;

    ThreadsCommunicator(UniqueId id, int rank, int worldSize, int device, ThreadsOptions options, PackState pack) {
        super(id, rank, worldSize, device, options.communicator(), pack::cancellation);
        this.pack = pack;
        this.options = options;
        CudaEvent[] events = memcpyEvents(options, pack, rank);
        readyForPeers = events[0];
        doneReading = events[1];
        readsDone = events[2];
    }

    /** One rank of a split: the same transports, host collectives among the split's members (its own pack). */
    private ThreadsCommunicator(Split split, ThreadsOptions options, PackState pack) {
        super(split);
        this.pack = pack;
        this.options = options;
        CudaEvent[] events = memcpyEvents(options, pack, split.rank());
        readyForPeers = events[0];
        doneReading = events[1];
        readsDone = events[2];
    }

    /** readyForPeers, doneReading and readsDone (tracked by the pack) for memcpy transports; nulls otherwise. */
    private static CudaEvent[] memcpyEvents(ThreadsOptions options, PackState pack, int rank) {
        if (!options.usesMemcpy()) {
            return new CudaEvent[3];
        }
        CudaEvent[] events = {CudaEvent.create(), CudaEvent.create(), CudaEvent.create()};
        pack.trackReads(rank, events[2]);
        return events;
    }

    /**
     * The ranks of one color share a child pack (barrier, gathers, throttle, failure) that is tied
     * to this pack both ways: a failure in either releases and aborts the ranks of both.
     */
    /** Counted on every rank, members or not, so that the n-th split has the same number everywhere. */
    @Override
    protected void beforeSplit(int color, int key) {
        splits++;
    }

    @Override
    protected Communicator newChild(Split split) {
        PackState childPack = pack.child(splits, split.color(), split.members());
        ThreadsCommunicator child = new ThreadsCommunicator(split, options, childPack);
        childPack.register(split.rank(), child);
        return child;
    }

    @Override
    protected void hostBarrier() {
        pack.barrier("barrier", rank());
    }

    @Override
    protected List<byte[]> hostGather(byte[] local, int root) {
        List<byte[]> all = pack.exchange("gatherBytesHost", rank(), local.clone());
        return rank() == root ? all : List.of();
    }

    @Override
    protected List<byte[]> hostAllGather(byte[] local) {
        return pack.exchange("allGatherBytesHost", rank(), local.clone());
    }

    /**
     * Called before and after each transaction. Before: wait while this rank is more than
     * {@link ThreadsOptions#maxLead()} transactions ahead of the slowest rank. One process drives
     * all GPUs here; a thread that runs far ahead fills its device's launch queue, and once that is
     * full the CUDA launch blocks inside the driver, which can stall the launches the other ranks'
     * threads need to make the collectives it is waiting for complete.
     */
    @Override
    protected void throttleLaunchQueue(boolean beforeTransaction) {
        if (beforeTransaction) {
            pack.throttle(rank(), ++transactions, options.maxLead());
        }
    }

    @Override
    protected void onExecute(CommandBuffer commands) {
        if (!options.usesMemcpy()) {
            return;
        }
        stream().record(readyForPeers);
        published = pack.exchange("execute", rank(),
                new Published(rank(), List.copyOf(commands.commands()), readyForPeers, doneReading));
        checkMatching(published, worldSize(), options);
        for (Published peer : published) {
            if (peer.rank() != rank()) {
                stream().waitFor(peer.readyForPeers());
            }
        }
        gatherIndex = 0;
        allToAllIndex = 0;
        recvIndex = new int[worldSize()];
    }

    @Override
    protected void onFinish(CudaEvent signal) {
        if (!options.usesMemcpy()) {
            return;
        }
        stream().record(doneReading);
        pack.barrier("execute", rank());
        for (Published peer : published) {
            if (peer.rank() != rank()) {
                stream().waitFor(peer.doneReading());
            }
        }
        published = null;
    }

    @Override
    protected void gatherWeight(Command.Gather gather) {
        if (!options.memcpyAllGather()) {
            super.gatherWeight(gather);
            return;
        }
        int index = gatherIndex++;
        pack.enqueueReads("execute", rank(), () -> {
            for (Published peer : published) {
                DeviceTensor source = peer.rank() == rank() ? gather.shard() : peer.gathers().get(index).shard();
                DeviceTensor target = gather.full().shard(peer.rank(), worldSize());
                if (source.address() != target.address()) {
                    copy(target, source);
                }
            }
            stream().record(readsDone);
        });
    }

    @Override
    protected void send(Command.Send send) {
        if (!options.memcpySendRecv()) {
            super.send(send);
        }
        // memcpy: the receiver pulls; this rank's signal waits until it has (see onFinish).
    }

    @Override
    protected void recv(Command.Recv recv) {
        if (!options.memcpySendRecv()) {
            super.recv(recv);
            return;
        }
        int peer = recv.peer();
        Command.Send matching = published.get(peer).sendsTo(rank()).get(recvIndex[peer]++);
        pack.enqueueReads("execute", rank(), () -> {
            copy(recv.tensor(), matching.tensor());
            stream().record(readsDone);
        });
    }

    @Override
    protected void allToAll(Command.AllToAll allToAll) {
        if (!options.memcpySendRecv()) {
            super.allToAll(allToAll);
            return;
        }
        // Pull this rank's slot of every rank's send buffer (its own: a local copy) into the slot of
        // that rank, from the peer's all-to-all at the same position.
        int index = allToAllIndex++;
        pack.enqueueReads("execute", rank(), () -> {
            for (Published peer : published) {
                DeviceTensor source = peer.allToAlls().get(index).send().shard(rank(), worldSize());
                copy(allToAll.recv().shard(peer.rank(), worldSize()), source);
            }
            stream().record(readsDone);
        });
    }

    private void copy(DeviceTensor target, DeviceTensor source) {
        stream().copyAsync(source, target);
    }

    /**
     * Checks the whole pack's transaction (every rank runs the same check on the same data, so all
     * ranks fail together with the same message): sends and receives matched per pair and order
     * with equal sizes, and the same all-gathers everywhere.
     */
    private static void checkMatching(List<Published> all, int world, ThreadsOptions options) {
        if (options.memcpySendRecv()) {
            for (int from = 0; from < world; from++) {
                for (int to = 0; to < world; to++) {
                    // from == to included: a send to this rank is matched by its receive from itself.
                    List<Command.Send> sends = all.get(from).sendsTo(to);
                    List<Command.Recv> recvs = all.get(to).recvsFrom(from);
                    if (sends.size() != recvs.size()) {
                        throw new IllegalStateException("execute: rank " + from + " sends " + sends.size()
                                + " message(s) to rank " + to + " but rank " + to + " receives " + recvs.size()
                                + " from rank " + from + " (bytes sent " + sends.stream().map(s -> s.tensor().bytes()).toList()
                                + ", received " + recvs.stream().map(r -> r.tensor().bytes()).toList()
                                + "; unmatched send/recv in memcpy mode)");
                    }
                    for (int i = 0; i < sends.size(); i++) {
                        long sent = sends.get(i).tensor().bytes();
                        long received = recvs.get(i).tensor().bytes();
                        if (sent != received) {
                            throw new IllegalStateException("execute: send #" + (i + 1) + " from rank " + from
                                    + " to rank " + to + " has " + sent + " bytes but the matching recv on rank " + to
                                    + " has " + received + " bytes");
                        }
                    }
                }
            }
        }
        if (options.memcpySendRecv()) {
            List<Command.AllToAll> reference = all.get(0).allToAlls();
            for (Published peer : all) {
                List<Command.AllToAll> allToAlls = peer.allToAlls();
                if (allToAlls.size() != reference.size()) {
                    throw new IllegalStateException("execute: rank " + peer.rank() + " has " + allToAlls.size()
                            + " all-to-all(s), rank 0 has " + reference.size());
                }
                for (int i = 0; i < allToAlls.size(); i++) {
                    if (allToAlls.get(i).send().bytes() != reference.get(i).send().bytes()) {
                        throw new IllegalStateException("execute: all-to-all #" + (i + 1) + " sends "
                                + allToAlls.get(i).send().bytes() + " bytes on rank " + peer.rank() + " but "
                                + reference.get(i).send().bytes() + " bytes on rank 0");
                    }
                }
            }
        }
        if (options.memcpyAllGather()) {
            List<Command.Gather> reference = all.get(0).gathers();
            for (Published peer : all) {
                List<Command.Gather> gathers = peer.gathers();
                if (gathers.size() != reference.size()) {
                    throw new IllegalStateException("execute: rank " + peer.rank() + " has " + gathers.size()
                            + " all-gather(s), rank 0 has " + reference.size());
                }
                for (int i = 0; i < gathers.size(); i++) {
                    if (gathers.get(i).shard().bytes() != reference.get(i).shard().bytes()) {
                        throw new IllegalStateException("execute: all-gather #" + (i + 1) + " has a shard of "
                                + gathers.get(i).shard().bytes() + " bytes on rank " + peer.rank() + " but "
                                + reference.get(i).shard().bytes() + " bytes on rank 0");
                    }
                }
            }
        }
    }

    @Override
    protected void onClose() {
        // A failed pack: this rank's thread (and with it ThreadsPack.join) ends only after every
        // copy from or into buffers that user code may free once the pack is gone.
        pack.awaitReadsDrained(rank());
        if (readyForPeers != null) {
            // Peers may still be about to wait on these (a failing pack unwinds at different speeds).
            pack.retire(readyForPeers, doneReading, readsDone);
        }
        if (pack.isChild()) {
            // What the launcher does for the pack's own communicators when a rank's work ends.
            pack.finished(rank());
            pack.leave();
        }
    }

    @Override
    protected String explainAbort(String reason) {
        String cause = pack.cancellation();
        return cause == null || reason.contains(cause) ? reason : cause + "; then: " + reason;
    }

    @Override
    protected void onAbort(String reason) {
        pack.fail(rank(), new CommunicatorAbortedException("communicator of rank " + rank() + " aborted: " + reason));
        if (Thread.currentThread() == owner) {
            // This rank failed in its own call (a CUDA or NCCL error): its exception is about to reach user code.
            pack.awaitReadsDrained(rank());
        }
    }

    @Override
    protected void beforeAbortedException() {
        // The abort may be this communicator's own (watchdog): make it the pack's failure before draining.
        pack.fail(rank(), new CommunicatorAbortedException("communicator of rank " + rank() + " aborted: "
                + abortReason()));
        pack.awaitReadsDrained(rank());
    }
}
