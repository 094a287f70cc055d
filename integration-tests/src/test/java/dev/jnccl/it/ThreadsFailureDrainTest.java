package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.fail;

import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.testsupport.NativeEnv;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import dev.jnccl.threads.ThreadsPack;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A failing pack with memcpy transports must not release a rank (nor return from
 * {@link ThreadsPack#join()}) while a peer's comms stream still copies from that rank's buffers.
 *
 * <p>The race, provoked with the host emulation's stream delay: every stream of device 3 sleeps
 * before each item, so rank 3's pulls (the all-gather's copies from every peer's shard, the
 * receive from rank 2) run long after the transaction was enqueued. Rank 0 then fails; ranks 1, 2
 * and 3 are released by the failure in three different calls (await, barrier, synchronize) and at
 * once overwrite their shard with a poison pattern and free it, as training code freeing its
 * buffers would. Rank 0's shard is owned by the test and poisoned right after {@code join()}
 * returns. Every rank's gathered and received data is then compared element by element with the
 * random shards: a copy that ran after its source was released shows the poison (or garbage).
 *
 * <p>{@code -Djnccl.it.drainRepeats=N} repeats the scenario (default 2) to run it under load.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsFailureDrainTest {
    private static final int WORLD = 4;
    private static final int FAILING = 0;
    private static final int SLOW_DEVICE = 3;
    /** Small shards (16 KiB): the emulation's malloc keeps them on the heap, so a late read never faults. */
    private static final int SHARD = 4096;
    private static final int POISON = 0xDEADBEEF;
    private static final String DELAY_US = "30000";
    private static final int REPEATS = Integer.getInteger("jnccl.it.drainRepeats", 2);

    /** Buffers of one rank: its shard (read by every peer), its gather target and its receive buffer. */
    record Buffers(DeviceMemory shard, DeviceMemory full, DeviceMemory received) {}

    @Test
    void peersNeverReadTheBuffersOfRanksReleasedByAFailure() {
        Packs.assumeHost("JNCCL_HOST_DELAY_US / _DEVICE delay the copies of one rank");
        Packs.assumeDevices(WORLD);
        for (int run = 0; run < REPEATS; run++) {
            runOnce(Packs.newSeed(), run);
        }
    }

    @SuppressWarnings("try")
    private static void runOnce(long seed, int run) {
        String where = "run " + run + " (seed " + seed + ")";
        ThreadsOptions options = ThreadsOptions.defaults().withMemcpyAllGather(true).withMemcpySendRecv(true);
        Buffers[] buffers = new Buffers[WORLD];
        Map<Integer, Throwable> released = new ConcurrentHashMap<>();
        RuntimeException boom = new IllegalStateException("rank " + FAILING + " fails while a peer still copies (test)");
        Throwable thrown;
        // Streams read the delay when they are created: set it before the pack, restore it after join().
        try (NativeEnv ignored = NativeEnv.set("JNCCL_HOST_DELAY_US", DELAY_US,
                "JNCCL_HOST_DELAY_DEVICE", Integer.toString(SLOW_DEVICE))) {
            ThreadsPack pack = ThreadsCommunicators.launch(WORLD, options, comm -> {
                int rank = comm.rank();
                buffers[rank] = allocate(seed, rank);
                try (CudaEvent signal = CudaEvent.create()) {
                    Buffers mine = buffers[rank];
                    try (Transaction tx = comm.begin(comm.stream())) {
                        tx.allGather(tensor(mine.shard()), tensor(mine.full()))
                                .send(tensor(mine.shard()), (rank + 1) % WORLD)
                                .recv(tensor(mine.received()), (rank + WORLD - 1) % WORLD);
                        tx.execute(signal);
                    }
                    if (rank == FAILING) {
                        throw boom;
                    }
                    try {
                        switch (rank) {
                            case 1 -> comm.await(signal);
                            case 2 -> comm.barrier();
                            default -> comm.synchronize();
                        }
                        comm.barrier(); // if the wait above ended before the failure arrived
                    } catch (CommunicatorAbortedException e) {
                        released.put(rank, e);
                        // What user code may do as soon as the exception arrives: reuse, then free.
                        poison(mine.shard());
                        mine.shard().close();
                        throw e;
                    }
                }
            });
            try {
                thrown = assertTimeoutPreemptively(Duration.ofSeconds(60),
                        () -> assertThrows(Throwable.class, pack::join, where + ": join() returned normally"),
                        () -> where + ": join() did not return; pack threads:\n  "
                                + String.join("\n  ", Packs.packThreads()));
            } finally {
                pack.close();
            }
        }
        try {
            // join() returned: nothing may read rank 0's shard any more either.
            poison(buffers[FAILING].shard());
            assertSame(boom, thrown, () -> where + ": join() must rethrow rank 0's exception, got "
                    + ThreadsFailureTest.describe(thrown));
            assertEquals(WORLD - 1, released.size(), () -> where + ": every other rank must be released by the"
                    + " failure, got " + released.keySet());
            for (Throwable t : thrown.getSuppressed()) {
                assertInstanceOf(CommunicatorAbortedException.class, t, () -> ThreadsFailureTest.describe(t));
            }
            Packs.assertNoPackThreads();
            for (int rank = 0; rank < WORLD; rank++) {
                int[] full = read(buffers[rank].full(), WORLD * SHARD);
                for (int peer = 0; peer < WORLD; peer++) {
                    assertData(where + ": rank " + rank + "'s all-gather, shard of rank " + peer, shardData(seed, peer),
                            Arrays.copyOfRange(full, peer * SHARD, (peer + 1) * SHARD));
                }
                int from = (rank + WORLD - 1) % WORLD;
                assertData(where + ": rank " + rank + "'s receive from rank " + from, shardData(seed, from),
                        read(buffers[rank].received(), SHARD));
            }
        } finally {
            for (Buffers b : buffers) {
                if (b != null) {
                    b.shard().close();
                    b.full().close();
                    b.received().close();
                }
            }
        }
    }

    /** The rank's buffers on its device: random shard, and targets filled with other random data. */
    private static Buffers allocate(long seed, int rank) {
        List<DeviceMemory> made = new ArrayList<>();
        try {
            DeviceMemory shard = track(made, DeviceMemory.allocate(DType.INT32, SHARD));
            DeviceMemory full = track(made, DeviceMemory.allocate(DType.INT32, (long) WORLD * SHARD));
            DeviceMemory received = track(made, DeviceMemory.allocate(DType.INT32, SHARD));
            shard.copyFromHost(MemorySegment.ofArray(shardData(seed, rank)));
            full.copyFromHost(MemorySegment.ofArray(Data.int32(Data.seed(seed, rank, "stale full"), WORLD * SHARD)));
            received.copyFromHost(MemorySegment.ofArray(Data.int32(Data.seed(seed, rank, "stale received"), SHARD)));
            return new Buffers(shard, full, received);
        } catch (RuntimeException e) {
            made.forEach(DeviceMemory::close);
            throw e;
        }
    }

    private static DeviceMemory track(List<DeviceMemory> made, DeviceMemory memory) {
        made.add(memory);
        return memory;
    }

    private static int[] shardData(long seed, int rank) {
        return Data.int32(Data.seed(seed, rank, "shard"), SHARD);
    }

    private static DeviceTensor tensor(DeviceMemory memory) {
        return memory.tensor(DType.INT32);
    }

    private static void poison(DeviceMemory memory) {
        int[] poison = new int[Math.toIntExact(memory.bytes() / Integer.BYTES)];
        Arrays.fill(poison, POISON);
        memory.copyFromHost(MemorySegment.ofArray(poison));
    }

    private static int[] read(DeviceMemory memory, int count) {
        int[] values = new int[count];
        memory.copyToHost(MemorySegment.ofArray(values));
        return values;
    }

    private static void assertData(String what, int[] expected, int[] actual) {
        assertEquals(expected.length, actual.length, what + ": length");
        int bad = 0;
        int first = -1;
        int poisoned = 0;
        for (int i = 0; i < expected.length; i++) {
            if (expected[i] != actual[i]) {
                bad++;
                if (first < 0) {
                    first = i;
                }
                if (actual[i] == POISON) {
                    poisoned++;
                }
            }
        }
        if (bad > 0) {
            int at = first;
            fail(what + ": " + bad + " of " + expected.length + " elements differ (" + poisoned
                    + " hold the poison written after the source rank was released); first at " + at + ": expected "
                    + expected[at] + ", got " + actual[at]);
        }
    }
}
