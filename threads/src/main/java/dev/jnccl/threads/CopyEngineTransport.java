package dev.jnccl.threads;

import dev.jnccl.DeviceTensor;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.spi.Command;
import dev.jnccl.spi.Command.Kind;
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
        /**
         * The commands of {@code kind} in command order (matched by position, as on NCCL), for a send or
         * receive only those with {@code peer}.
         */
        List<Command> of(Kind kind, int peer) {
            List<Command> found = new ArrayList<>();
            for (Command command : commands) {
                if (command.kind() == kind && (kind.role() != Command.Role.PEER || command.peer() == peer)) {
                    found.add(command);
                }
            }
            return found;
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
        switch (command.kind()) {
            case ALL_GATHER -> {
                if (!options.memcpyAllGather()) {
                    return false;
                }
                allGather(command);
            }
            // The receiver pulls; this rank's signal waits until it has (see afterCommands).
            case SEND -> {
                return options.memcpySendRecv();
            }
            case RECV -> {
                if (!options.memcpySendRecv()) {
                    return false;
                }
                recv(command);
            }
            case ALL_TO_ALL -> {
                if (!options.memcpySendRecv()) {
                    return false;
                }
                allToAll(command);
            }
            default -> {
                return false; // every other kind (reductions, rooted and uneven ones, any new one): NCCL's
            }
        }
        return true;
    }

    private void allGather(Command gather) {
        int index = gatherIndex++;
        pack.enqueueReads("execute", rank, () -> {
            for (Published peer : published) {
                DeviceTensor source = peer.rank() == rank ? gather.src() : peer.of(Kind.ALL_GATHER, -1).get(index).src();
                DeviceTensor target = gather.dst().shard(peer.rank(), worldSize);
                if (source.address() != target.address()) {
                    copy(target, source);
                }
            }
            stream.record(readsDone);
        });
    }

    private void recv(Command recv) {
        int peer = recv.peer();
        Command matching = published.get(peer).of(Kind.SEND, rank).get(recvIndex[peer]++);
        pack.enqueueReads("execute", rank, () -> {
            copy(recv.dst(), matching.src());
            stream.record(readsDone);
        });
    }

    private void allToAll(Command allToAll) {
        // Pull this rank's slot of every rank's send buffer (its own: a local copy) into the slot of
        // that rank, from the peer's all-to-all at the same position.
        int index = allToAllIndex++;
        pack.enqueueReads("execute", rank, () -> {
            for (Published peer : published) {
                DeviceTensor source = peer.of(Kind.ALL_TO_ALL, -1).get(index).src().shard(rank, worldSize);
                copy(allToAll.dst().shard(peer.rank(), worldSize), source);
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
                    List<Command> sends = all.get(from).of(Kind.SEND, to);
                    List<Command> recvs = all.get(to).of(Kind.RECV, from);
                    if (sends.size() != recvs.size()) {
                        throw new IllegalStateException("execute: rank " + from + " sends " + sends.size()
                                + " message(s) to rank " + to + " but rank " + to + " receives " + recvs.size()
                                + " from rank " + from + " (bytes sent " + sends.stream().map(Command::bytes).toList()
                                + ", received " + recvs.stream().map(Command::bytes).toList()
                                + "; unmatched send/recv in memcpy mode)");
                    }
                    for (int i = 0; i < sends.size(); i++) {
                        long sent = sends.get(i).bytes();
                        long received = recvs.get(i).bytes();
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
            checkSame(all, Kind.ALL_TO_ALL, "all-to-all");
        }
        if (options.memcpyAllGather()) {
            checkSame(all, Kind.ALL_GATHER, "all-gather");
        }
    }

    /** The commands of {@code kind} alike on every rank: as many, each of the same bytes as rank 0's. */
    private static void checkSame(List<Published> all, Kind kind, String name) {
        List<Command> reference = all.get(0).of(kind, -1);
        for (Published peer : all) {
            List<Command> commands = peer.of(kind, -1);
            if (commands.size() != reference.size()) {
                throw new IllegalStateException("execute: rank " + peer.rank() + " has " + commands.size() + " "
                        + name + "(s), rank 0 has " + reference.size());
            }
            for (int i = 0; i < commands.size(); i++) {
                long bytes = commands.get(i).src().bytes();
                long expected = reference.get(i).src().bytes();
                if (bytes != expected) {
                    throw new IllegalStateException("execute: " + name + " #" + (i + 1) + " sends " + bytes
                            + " bytes on rank " + peer.rank() + " but " + expected + " bytes on rank 0");
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
