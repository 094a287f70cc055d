package dev.jnccl;

import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.Membership;
import dev.jnccl.spi.Modes;
import dev.jnccl.spi.RankParts;
import dev.jnccl.spi.Transport;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * A minimal multi-rank harness for core's own tests (threads mode proper lives in jnccl-threads):
 * one thread per rank, host hooks through a CyclicBarrier.
 */
final class LocalRanks {
    private LocalRanks() {}

    /** Host side of one rank: barrier and gathers through a CyclicBarrier and shared slots. */
    static final class TestHost implements HostSide {
        private final int rank;
        private final CyclicBarrier barrier;
        private final byte[][] slots;

        TestHost(int rank, CyclicBarrier barrier, byte[][] slots) {
            this.rank = rank;
            this.barrier = barrier;
            this.slots = slots;
        }

        @Override
        public void barrier(long timeoutNanos) {
            try {
                barrier.await(30, TimeUnit.SECONDS);
            } catch (Exception e) {
                throw new IllegalStateException("barrier failed", e);
            }
        }

        @Override
        public List<byte[]> gather(byte[] local, int root, long timeoutNanos) {
            List<byte[]> all = allGather(local, timeoutNanos);
            return rank == root ? all : List.of();
        }

        @Override
        public List<byte[]> allGather(byte[] local, long timeoutNanos) {
            slots[rank] = local.clone();
            barrier(timeoutNanos);
            List<byte[]> all = new ArrayList<>();
            for (byte[] slot : slots) {
                all.add(slot.clone());
            }
            barrier(timeoutNanos);
            return all;
        }

        @Override
        public RankParts split(Membership membership) {
            throw new UnsupportedOperationException("split: core's test ranks have no sub-communicators");
        }
    }

    /** Rank {@code rank} of {@code world}, host side through {@code barrier} and {@code slots}. */
    static Communicator create(UniqueId id, int rank, int world, int device, CommunicatorOptions options,
                               CyclicBarrier barrier, byte[][] slots) {
        return create(id, rank, world, device, options, barrier, slots, false);
    }

    /** As above; optionally the all-to-all path of an NCCL without ncclAlltoAll (before 2.28), which the emulation is not. */
    static Communicator create(UniqueId id, int rank, int world, int device, CommunicatorOptions options,
                               CyclicBarrier barrier, byte[][] slots, boolean allToAllBySendRecv) {
        return create(id, rank, world, device, options, new RankParts(new TestHost(rank, barrier, slots),
                Transport.NCCL), allToAllBySendRecv);
    }

    /** Rank {@code rank} of {@code world} made of {@code parts}. */
    static Communicator create(UniqueId id, int rank, int world, int device, CommunicatorOptions options,
                               RankParts parts, boolean allToAllBySendRecv) {
        Communicator communicator = Modes.communicator(id, rank, world, device, options, parts);
        if (allToAllBySendRecv) {
            communicator.commandRunner().forceAllToAllBySendRecv();
        }
        return communicator;
    }

    /** Runs {@code body} on each of {@code world} ranks (rank r on device r); returns each rank's result or failure. */
    static <T> List<Object> run(int world, CommunicatorOptions options, Function<Communicator, T> body) throws Exception {
        return run(world, options, false, body);
    }

    /** As {@link #run(int, CommunicatorOptions, Function)}; all-to-alls as grouped send/recv when asked. */
    static <T> List<Object> run(int world, CommunicatorOptions options, boolean allToAllBySendRecv,
                                Function<Communicator, T> body) throws Exception {
        UniqueId id = UniqueId.generate();
        CyclicBarrier barrier = new CyclicBarrier(world);
        byte[][] slots = new byte[world][];
        ExecutorService pool = Executors.newFixedThreadPool(world);
        try {
            List<Future<Object>> futures = new ArrayList<>();
            for (int rank = 0; rank < world; rank++) {
                int r = rank;
                futures.add(pool.submit(() -> {
                    try (Communicator comm = create(id, r, world, r, options, barrier, slots, allToAllBySendRecv)) {
                        return (Object) body.apply(comm);
                    } catch (Throwable t) {
                        barrier.reset();
                        return t;
                    }
                }));
            }
            List<Object> results = new ArrayList<>();
            for (Future<Object> f : futures) {
                results.add(f.get(60, TimeUnit.SECONDS));
            }
            return results;
        } finally {
            pool.shutdownNow();
            pool.awaitTermination(10, TimeUnit.SECONDS);
        }
    }

    static void rethrowAny(List<Object> results) throws Throwable {
        for (Object result : results) {
            if (result instanceof Throwable t) {
                throw t;
            }
        }
    }

}
