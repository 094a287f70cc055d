package dev.jnccl;

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

    static final class TestCommunicator extends Communicator {
        private final CyclicBarrier barrier;
        private final byte[][] slots;
        private final boolean allToAllBySendRecv;

        TestCommunicator(UniqueId id, int rank, int world, int device, CommunicatorOptions options,
                         CyclicBarrier barrier, byte[][] slots) {
            this(id, rank, world, device, options, barrier, slots, false);
        }

        TestCommunicator(UniqueId id, int rank, int world, int device, CommunicatorOptions options,
                         CyclicBarrier barrier, byte[][] slots, boolean allToAllBySendRecv) {
            super(id, rank, world, device, options);
            this.barrier = barrier;
            this.slots = slots;
            this.allToAllBySendRecv = allToAllBySendRecv;
        }

        /** Optionally the path of an NCCL without ncclAlltoAll (before 2.28), which the emulation is not. */
        @Override
        protected void allToAll(Command.AllToAll allToAll) {
            if (allToAllBySendRecv) {
                allToAllBySendRecv(allToAll);
            } else {
                super.allToAll(allToAll);
            }
        }

        @Override
        protected void hostBarrier() {
            try {
                barrier.await(30, TimeUnit.SECONDS);
            } catch (Exception e) {
                throw new IllegalStateException("barrier failed", e);
            }
        }

        @Override
        protected List<byte[]> hostGather(byte[] local, int root) {
            List<byte[]> all = hostAllGather(local);
            return rank() == root ? all : List.of();
        }

        @Override
        protected List<byte[]> hostAllGather(byte[] local) {
            slots[rank()] = local.clone();
            hostBarrier();
            List<byte[]> all = new ArrayList<>(List.of(slots.clone()));
            hostBarrier();
            return all;
        }
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
                    try (TestCommunicator comm = new TestCommunicator(id, r, world, r, options, barrier, slots,
                            allToAllBySendRecv)) {
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
