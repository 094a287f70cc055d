package dev.jnccl.junit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DType;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.threads.ThreadsOptions;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.List;
import java.util.Queue;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.TestInfo;
import org.junit.jupiter.api.Timeout;

/**
 * Test classes that {@link MultiRankExtensionTest} runs through JUnit's engine test kit (not run by
 * Surefire: no class here is named as a test). Their rank bodies check their own data; the kit's
 * events say what JUnit reported.
 */
final class MultiRankFixtures {
    /** What the ranks saw, one line each, for the test to check. */
    static final Queue<String> SEEN = new ConcurrentLinkedQueue<>();
    /** Device memory of the ranks, freed after the pack ended (a failing pack's peers may still use it). */
    static final List<DeviceMemory> MEMORY = new CopyOnWriteArrayList<>();
    static final AtomicInteger RUNNING = new AtomicInteger();
    static final AtomicInteger MOST_RUNNING = new AtomicInteger();
    /** The seed of this run's data (printed by the test on a failure). */
    static final long SEED = System.nanoTime();

    private MultiRankFixtures() {}

    /** Rank r's data: {@code count} random ints from the seed, the world and the rank. */
    static int[] data(int rank, int world, int count) {
        SplittableRandom random = new SplittableRandom(SEED ^ (31L * world + rank));
        return random.ints(count, -1_000_000, 1_000_000).toArray();
    }

    /** An INT32 all-reduce (sum) of every rank's random data, checked element by element. */
    static void allReduceChecked(Communicator comm, int count) {
        int world = comm.worldSize();
        int[] expected = new int[count];
        for (int peer = 0; peer < world; peer++) {
            int[] theirs = data(peer, world, count);
            for (int i = 0; i < count; i++) {
                expected[i] += theirs[i];
            }
        }
        DeviceMemory memory = DeviceMemory.allocate(DType.INT32, count);
        MEMORY.add(memory);
        memory.copyFromHost(MemorySegment.ofArray(data(comm.rank(), world, count)));
        try (CudaStream stream = CudaStream.create()) {
            comm.allReduce(memory.tensor(DType.INT32), ReduceOp.SUM, stream);
            comm.synchronize();
        }
        int[] actual = new int[count];
        memory.copyToHost(MemorySegment.ofArray(actual));
        for (int i = 0; i < count; i++) {
            if (actual[i] != expected[i]) {
                fail("rank " + comm.rank() + " of " + world + ": element " + i + " is " + actual[i] + ", expected "
                        + expected[i] + " (seed " + SEED + ")");
            }
        }
    }

    /** Frees the ranks' memory after each invocation (on JUnit's thread, once the pack has ended). */
    abstract static class FreesMemory {
        @AfterEach
        void free() {
            MEMORY.forEach(DeviceMemory::close);
            MEMORY.clear();
        }
    }

    /** A watchdog of 2 s polled every 50 ms: a hung or slow transaction aborts the pack quickly. */
    static final class QuickWatchdog implements Supplier<ThreadsOptions> {
        @Override
        public ThreadsOptions get() {
            return ThreadsOptions.defaults().withCommunicator(CommunicatorOptions.defaults()
                    .withWatchdog(Duration.ofSeconds(2)).withWatchdogInterval(Duration.ofMillis(50)));
        }
    }

    static class Worlds extends FreesMemory {
        @MultiRankTest(worlds = {1, 2, 3})
        void allReduceSumsRandomData(Communicator comm, RankInfo rank, TestInfo test) {
            assertEquals(rank.rank(), comm.rank());
            assertEquals(rank.world(), comm.worldSize());
            SEEN.add(test.getDisplayName() + ": rank " + rank.rank() + " of " + rank.world() + " on device "
                    + rank.device() + " (" + comm.device() + ") " + rank.backend());
            allReduceChecked(comm, 1000 + 17 * rank.world());
        }
    }

    static class Shared extends FreesMemory {
        @MultiRankTest(worlds = 3, placement = Placement.SHARED)
        void everyRankOnDeviceZero(Communicator comm, RankInfo rank) {
            SEEN.add("rank " + rank.rank() + " on device " + comm.device());
            allReduceChecked(comm, 4099);
        }
    }

    static class AutoPlacement extends FreesMemory {
        @MultiRankTest(worlds = 9)
        void nineRanks(Communicator comm, RankInfo rank) {
            SEEN.add("rank " + rank.rank() + " on device " + comm.device());
            allReduceChecked(comm, 999);
        }
    }

    static class TooFewDevices extends FreesMemory {
        @MultiRankTest(worlds = {2, 64}, placement = Placement.GPUS)
        void oneRankPerDevice(Communicator comm) {
            allReduceChecked(comm, 333);
        }
    }

    static class OneRankFails {
        @MultiRankTest(worlds = 3)
        void rankOneThrows(Communicator comm) {
            comm.barrier();
            if (comm.rank() == 1) {
                throw new IllegalStateException("rank 1 gave up");
            }
            comm.barrier(); // released by the pack: rank 1 never comes
            fail("rank " + comm.rank() + " passed a barrier without rank 1");
        }
    }

    static class TwoRanksFail {
        @MultiRankTest(worlds = 4)
        void ranksZeroAndTwoThrow(Communicator comm) throws Exception {
            comm.barrier();
            if (comm.rank() % 2 == 0) {
                throw new java.io.IOException("rank " + comm.rank() + " lost its input");
            }
            comm.barrier();
            fail("rank " + comm.rank() + " passed a barrier without ranks 0 and 2");
        }
    }

    static class AssumptionInARank {
        @MultiRankTest(worlds = 2)
        void rankOneNeedsSomethingAbsent(Communicator comm) {
            comm.barrier();
            org.junit.jupiter.api.Assumptions.assumeTrue(comm.rank() != 1, "rank 1 needs a second NIC");
            comm.barrier(); // released: rank 1 left
        }
    }

    static class FaultFails extends FreesMemory {
        @MultiRankTest(worlds = 3)
        @InjectFault(kind = InjectFault.Kind.FAIL, rank = 1, at = 2)
        void secondOperationOfRankOneFails(Communicator comm) {
            allReduceChecked(comm, 256);
            allReduceChecked(comm, 256);
            fail("rank " + comm.rank() + ": the second all-reduce completed although rank 1's failed");
        }
    }

    static class FaultCaught extends FreesMemory {
        @MultiRankTest(worlds = 2)
        @InjectFault(kind = InjectFault.Kind.FAIL, rank = 0, at = 2)
        void everyRankCatchesTheAbortAndReturns(Communicator comm) {
            try {
                // Rank 0's failure may reach rank 1 while it still waits for the first all-reduce.
                allReduceChecked(comm, 256);
                allReduceChecked(comm, 256);
                fail("rank " + comm.rank() + ": the second all-reduce completed although rank 0's failed");
            } catch (CommunicatorAbortedException e) {
                SEEN.add("rank " + comm.rank() + " caught: " + e.getMessage().lines().findFirst().orElse(""));
            }
        }
    }

    static class FaultHangs extends FreesMemory {
        @MultiRankTest(worlds = 2, options = QuickWatchdog.class)
        @InjectFault(kind = InjectFault.Kind.HANG, rank = 1, at = 2)
        void secondOperationOfRankOneHangs(Communicator comm) {
            allReduceChecked(comm, 128);
            allReduceChecked(comm, 128);
            fail("rank " + comm.rank() + ": the second all-reduce completed although rank 1 hangs in it");
        }
    }

    static class FaultLags extends FreesMemory {
        @MultiRankTest(worlds = 2)
        @InjectFault(kind = InjectFault.Kind.LAG, rank = 1, lagMicros = 20_000)
        void aSlowRankStillGetsTheRightData(Communicator comm) {
            for (int i = 0; i < 3; i++) {
                allReduceChecked(comm, 512);
            }
        }
    }

    static class FaultLagsPastTheWatchdog extends FreesMemory {
        @MultiRankTest(worlds = 2, options = QuickWatchdog.class)
        @InjectFault(kind = InjectFault.Kind.LAG, rank = 0, lagMicros = 6_000_000)
        void aRankSlowerThanTheWatchdogAbortsThePack(Communicator comm) {
            allReduceChecked(comm, 64);
            fail("rank " + comm.rank() + ": the all-reduce completed although rank 0 lags 6 s behind a 2 s watchdog");
        }
    }

    static class Deadline extends FreesMemory {
        @MultiRankTest(worlds = 2, timeoutSeconds = 5)
        @InjectFault(kind = InjectFault.Kind.HANG, rank = 0, at = 2)
        void hangsWithoutAWatchdog(Communicator comm) {
            allReduceChecked(comm, 64);
            allReduceChecked(comm, 64);
        }
    }

    static class InterruptedByJUnitTimeout {
        /** JUnit's own timeout interrupts the test's thread while the pack runs: the pack must end. */
        @MultiRankTest(worlds = 2)
        @Timeout(value = 1500, unit = TimeUnit.MILLISECONDS)
        void rankOneNeverComesToTheBarrier(Communicator comm) throws InterruptedException {
            if (comm.rank() == 1) {
                Thread.sleep(Duration.ofSeconds(60)); // interrupted when the pack is aborted
            }
            comm.barrier();
        }
    }

    static class Parallel extends FreesMemory {
        @MultiRankTest(worlds = {2, 3})
        void first(Communicator comm) throws InterruptedException {
            overlapProbe(comm);
        }

        @MultiRankTest(worlds = {2, 3})
        void second(Communicator comm) throws InterruptedException {
            overlapProbe(comm);
        }

        /** Counts the packs running at once (rank 0 counts its pack), with a collective in between. */
        private static void overlapProbe(Communicator comm) throws InterruptedException {
            if (comm.rank() == 0) {
                MOST_RUNNING.accumulateAndGet(RUNNING.incrementAndGet(), Math::max);
            }
            comm.barrier();
            allReduceChecked(comm, 100);
            Thread.sleep(50); // gives a second pack, if the lock let one in, time to show
            comm.barrier();
            if (comm.rank() == 0) {
                RUNNING.decrementAndGet();
            }
        }
    }

    static class EmptyWorlds {
        @MultiRankTest(worlds = {})
        void test(Communicator comm) { }
    }

    static class ZeroWorld {
        @MultiRankTest(worlds = {2, 0})
        void test(Communicator comm) { }
    }

    static class NegativeWorld {
        @MultiRankTest(worlds = -3)
        void test(Communicator comm) { }
    }

    static class ZeroTimeout {
        @MultiRankTest(timeoutSeconds = 0)
        void test(Communicator comm) { }
    }

    static class FaultRankOutsideTheWorld {
        @MultiRankTest(worlds = {4, 2})
        @InjectFault(kind = InjectFault.Kind.FAIL, rank = 2)
        void test(Communicator comm) { }
    }

    static class FaultAtZero {
        @MultiRankTest(worlds = 2)
        @InjectFault(kind = InjectFault.Kind.HANG, rank = 1, at = 0)
        void test(Communicator comm) { }
    }

    static class LagWithoutMicros {
        @MultiRankTest(worlds = 2)
        @InjectFault(kind = InjectFault.Kind.LAG, rank = 1)
        void test(Communicator comm) { }
    }
}
