package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.spi.Failures;
import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.Membership;
import dev.jnccl.spi.Modes;
import dev.jnccl.spi.RankEvents;
import dev.jnccl.spi.RankParts;
import dev.jnccl.spi.Transport;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.BrokenBarrierException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * A launcher for core's shrink tests: ranks as threads of this JVM meeting in a {@link Pack}
 * (barrier and slots), whose survivors' packs are made on first ask (so a shrink never waits for an
 * excluded rank), and whose lost ranks a test sets ({@link Failures#lostRanks}).
 */
final class ElasticRanks {
    private ElasticRanks() {}

    /** The ranks of one communicator: a barrier and the slots of the host gathers. */
    static final class Pack {
        final int size;
        private final CyclicBarrier barrier;
        private final byte[][] slots;
        private final Map<String, Pack> survivors = new ConcurrentHashMap<>();
        /** What {@link Failures#lostRanks} answers for this pack's communicators. */
        volatile List<Integer> lost = List.of();

        Pack(int size) {
            this.size = size;
            this.barrier = new CyclicBarrier(size);
            this.slots = new byte[size][];
        }

        RankParts parts(int rank) {
            Host host = new Host(this, rank);
            return new RankParts(host, Transport.NCCL, RankEvents.NONE, host);
        }

        /** {@return the grown world's pack of {@code ticket} (made by the first rank, old or new, that asks)} */
        Pack grown(GrowTicket ticket) {
            return survivors.computeIfAbsent("grow " + ticket, key -> new Pack(ticket.toWorld()));
        }

        /** {@return the survivors' pack of {@code members} (made by the first survivor that asks)} */
        Pack survivors(List<Integer> members) {
            return survivors.computeIfAbsent(members.toString(), key -> new Pack(members.size()));
        }
    }

    /** One rank's host side and failures; waits end on timeout, interrupt or a broken barrier as an abort. */
    static final class Host implements HostSide, Failures {
        private final Pack pack;
        private final int rank;

        Host(Pack pack, int rank) {
            this.pack = pack;
            this.rank = rank;
        }

        @Override
        public void barrier(long timeoutNanos) {
            try {
                pack.barrier.await(Math.min(timeoutNanos, TimeUnit.SECONDS.toNanos(60)), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                pack.barrier.reset();
                throw new CommunicatorAbortedException("barrier of rank " + rank + " interrupted", e);
            } catch (BrokenBarrierException | TimeoutException e) {
                pack.barrier.reset();
                throw new CommunicatorAbortedException("barrier of rank " + rank + " failed: " + e, e);
            }
        }

        @Override
        public List<byte[]> gather(byte[] local, int root, long timeoutNanos) {
            List<byte[]> all = allGather(local, timeoutNanos);
            return rank == root ? all : List.of();
        }

        @Override
        public List<byte[]> allGather(byte[] local, long timeoutNanos) {
            pack.slots[rank] = local.clone();
            barrier(timeoutNanos);
            List<byte[]> all = new ArrayList<>();
            for (byte[] slot : pack.slots) {
                all.add(slot.clone());
            }
            barrier(timeoutNanos);
            return all;
        }

        @Override
        public RankParts split(Membership membership) {
            throw new UnsupportedOperationException("split: not in these tests");
        }

        @Override
        public RankParts shrink(Membership survivors) {
            return pack.survivors(survivors.members()).parts(survivors.rank());
        }

        @Override
        public RankParts grow(Communicator existing, GrowTicket ticket) {
            return pack.grown(ticket).parts(rank);
        }

        @Override
        public List<Integer> lostRanks() {
            return pack.lost;
        }
    }

    /** Rank {@code rank} of {@code pack} on device {@code rank}. */
    static Communicator create(UniqueId id, Pack pack, int rank, CommunicatorOptions options) {
        return Modes.communicator(id, rank, pack.size, rank, options, pack.parts(rank));
    }

    /** Rank {@code rank}'s random contribution to step {@code seed}. */
    static int[] contribution(long seed, int rank, int count) {
        Random random = new Random(seed * 1_000_003L + rank);
        int[] values = new int[count];
        for (int i = 0; i < count; i++) {
            values[i] = random.nextInt();
        }
        return values;
    }

    /**
     * An all-reduce (sum) and an all-gather of random data on {@code comm}, whose ranks were
     * {@code oldRanks} (index: new rank), checked element by element against Java's sums.
     */
    static void checkCollectives(Communicator comm, List<Integer> oldRanks, long seed) {
        int count = 3 * 67;
        int world = comm.worldSize();
        assertEquals(oldRanks.size(), world, "world size of the survivors");
        int me = oldRanks.get(comm.rank());
        try (Arena arena = Arena.ofConfined(); CudaStream stream = CudaStream.create();
             DeviceMemory sum = DeviceMemory.allocate(DType.INT32, count);
             DeviceMemory shard = DeviceMemory.allocate(DType.INT32, count);
             DeviceMemory full = DeviceMemory.allocate(DType.INT32, (long) count * world)) {
            sum.copyFromHost(MemorySegment.ofArray(contribution(seed, me, count)));
            shard.copyFromHost(MemorySegment.ofArray(contribution(seed + 1, me, count)));
            comm.allReduce(sum.tensor(DType.INT32), ReduceOp.SUM, stream);
            comm.allGather(shard.tensor(DType.INT32), full.tensor(DType.INT32), stream);
            stream.synchronize();
            MemorySegment summed = arena.allocate(4L * count);
            MemorySegment gathered = arena.allocate(4L * count * world);
            sum.copyToHost(summed);
            full.copyToHost(gathered);
            int[] expected = new int[count];
            for (int old : oldRanks) {
                int[] part = contribution(seed, old, count);
                for (int i = 0; i < count; i++) {
                    expected[i] += part[i];
                }
            }
            for (int i = 0; i < count; i++) {
                assertEquals(expected[i], summed.getAtIndex(ValueLayout.JAVA_INT, i), "all-reduce element " + i);
            }
            for (int r = 0; r < world; r++) {
                int[] part = contribution(seed + 1, oldRanks.get(r), count);
                for (int i = 0; i < count; i++) {
                    assertEquals(part[i], gathered.getAtIndex(ValueLayout.JAVA_INT, (long) r * count + i),
                            "all-gather block " + r + " element " + i);
                }
            }
        }
    }
}
