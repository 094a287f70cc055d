package dev.jnccl.threads;

import dev.jnccl.DeviceTensor;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.spi.Command;
import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.Transport;
import java.util.ArrayList;
import java.util.List;

/**
 * Threads mode's transport for one rank: all-gathers ({@link ThreadsOptions#memcpyAllGather()}),
 * sends, receives and all-to-alls ({@link ThreadsOptions#memcpySendRecv()}) as device-to-device
 * copies by the copy engines instead of NCCL kernels (no SMs used); the other commands go to NCCL:
 * the reductions, broadcasts, the out-of-place forms, and also gather, scatter and the uneven
 * all-to-all, which NCCL runs as point-to-point traffic in groups of their own after the
 * transaction's group ({@link #enqueue} answers false for them). Their NCCL sends and receives never
 * meet the copies: the copies pair only with the transaction's own sends, receives and all-to-alls.
 *
 * <p>The copies are pulls: each rank copies what it receives from the peers' buffers on its
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
final class CopyEngineTransport implements Transport {

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

        List<Command.AllGather> gathers() {
            List<Command.AllGather> gathers = new ArrayList<>();
            for (Command command : commands) {
                if (command instanceof Command.AllGather gather) {
                    gathers.add(gather);
                }
            }
            return gathers;
        }
    }

    private final PackState pack;
    private final ThreadsOptions options;
    private final int rank;
    private final int worldSize;
    /** The exchanges with the peers are bounded as host-side waits are (see {@link HostSide#timeoutNanos}). */
    private final long hostTimeoutNanos;
    private final CudaEvent readyForPeers;
    private final CudaEvent doneReading;
    private final CudaEvent readsDone;
    private CudaStream stream;
    private List<Published> published;
    private int gatherIndex;
    private int allToAllIndex;
    private int[] recvIndex;

    /** The transport of {@code rank} of {@code pack}, whose readsDone event the pack tracks (see {@link PackState}). */
    CopyEngineTransport(PackState pack, ThreadsOptions options, int rank, int worldSize) {
        this.pack = pack;
        this.options = options;
        this.rank = rank;
        this.worldSize = worldSize;
        this.hostTimeoutNanos = HostSide.timeoutNanos(options.communicator());
        this.readyForPeers = CudaEvent.create();
        this.doneReading = CudaEvent.create();
        this.readsDone = CudaEvent.create();
        pack.trackReads(rank, readsDone);
    }

    /** The transport {@code options} ask for: this one when a copy-engine transport is chosen, else NCCL's. */
    static Transport of(PackState pack, ThreadsOptions options, int rank, int worldSize) {
        return options.usesMemcpy() ? new CopyEngineTransport(pack, options, rank, worldSize) : Transport.NCCL;
    }

    @Override
    public void beforeCommands(List<Command> commands, CudaStream stream) {
        if (CudaGraph.currentCapture().isPresent() && stream.isCapturing()) {
            // The copies pair with the peers' events exchanged on the host at each transaction; a
            // replay of the graph would skip that exchange and copy from buffers nobody vouched for.
            throw new IllegalStateException("execute: rank " + rank + " cannot capture a transaction into a CUDA"
                    + " graph with threads mode's copy-engine transport (ThreadsOptions.memcpyAllGather "
                    + options.memcpyAllGather() + ", memcpySendRecv " + options.memcpySendRecv() + "): it exchanges"
                    + " the peers' events on the host at each transaction, which a replay cannot do; turn it off with"
                    + " ThreadsOptions.withMemcpyAllGather(false).withMemcpySendRecv(false) to capture through NCCL");
        }
        this.stream = stream;
        stream.record(readyForPeers);
        // A copy: the peers read it while the communicator may already fill its list for the next transaction.
        Published own = new Published(rank, List.copyOf(commands), readyForPeers, doneReading);
        published = pack.exchange("execute", rank, own, hostTimeoutNanos);
        checkMatching(published, worldSize, options);
        for (Published peer : published) {
            if (peer.rank() != rank) {
                stream.waitFor(peer.readyForPeers());
            }
        }
        gatherIndex = 0;
        allToAllIndex = 0;
        recvIndex = new int[worldSize];
    }

    @Override
    public void afterCommands(CudaStream stream) {
        stream.record(doneReading);
        pack.barrier("execute", rank, hostTimeoutNanos);
        for (Published peer : published) {
            if (peer.rank() != rank) {
                stream.waitFor(peer.doneReading());
            }
        }
        published = null;
    }

    @Override
    public boolean enqueue(Command command, CudaStream stream) {
        switch (command) {
            case Command.AllGather gather when options.memcpyAllGather() -> allGather(gather);
            // The receiver pulls; this rank's signal waits until it has (see afterCommands).
            case Command.Send ignored when options.memcpySendRecv() -> { }
            case Command.Recv recv when options.memcpySendRecv() -> recv(recv);
            case Command.AllToAll allToAll when options.memcpySendRecv() -> allToAll(allToAll);
            default -> {
                return false;
            }
        }
        return true;
    }

    private void allGather(Command.AllGather gather) {
        int index = gatherIndex++;
        pack.enqueueReads("execute", rank, () -> {
            for (Published peer : published) {
                DeviceTensor source = peer.rank() == rank ? gather.shard() : peer.gathers().get(index).shard();
                DeviceTensor target = gather.full().shard(peer.rank(), worldSize);
                if (source.address() != target.address()) {
                    copy(target, source);
                }
            }
            stream.record(readsDone);
        });
    }

    private void recv(Command.Recv recv) {
        int peer = recv.peer();
        Command.Send matching = published.get(peer).sendsTo(rank).get(recvIndex[peer]++);
        pack.enqueueReads("execute", rank, () -> {
            copy(recv.tensor(), matching.tensor());
            stream.record(readsDone);
        });
    }

    private void allToAll(Command.AllToAll allToAll) {
        // Pull this rank's slot of every rank's send buffer (its own: a local copy) into the slot of
        // that rank, from the peer's all-to-all at the same position.
        int index = allToAllIndex++;
        pack.enqueueReads("execute", rank, () -> {
            for (Published peer : published) {
                DeviceTensor source = peer.allToAlls().get(index).send().shard(rank, worldSize);
                copy(allToAll.recv().shard(peer.rank(), worldSize), source);
            }
            stream.record(readsDone);
        });
    }

    private void copy(DeviceTensor target, DeviceTensor source) {
        stream.copyAsync(source, target);
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
            List<Command.AllGather> reference = all.get(0).gathers();
            for (Published peer : all) {
                List<Command.AllGather> gathers = peer.gathers();
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

    /** Peers may still be about to wait on this rank's events (a failing pack unwinds at different speeds). */
    @Override
    public void close() {
        pack.awaitReadsDrained(rank);
        pack.retire(readyForPeers, doneReading, readsDone);
    }
}
