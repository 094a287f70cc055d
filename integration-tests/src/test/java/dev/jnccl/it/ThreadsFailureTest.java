package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaException;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.it.Packs.Mode;
import dev.jnccl.testsupport.NativeEnv;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import dev.jnccl.threads.ThreadsPack;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.stream.Stream;
import org.opentest4j.AssertionFailedError;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Failure propagation of threads mode: a rank that throws (before communicating, in init, in a
 * transaction, in or around a barrier), a rank that hangs or fails inside NCCL (host emulation fault
 * injection, caught by the watchdog), and mismatched memcpy transfers. In every case
 * {@link ThreadsPack#join()} must rethrow the first failure within 10 s with the other ranks'
 * failures attached as suppressed exceptions, every other rank must have been released with an
 * exception naming the failed rank, and no {@code jnccl-rank-*} / {@code jnccl-watchdog-*} thread
 * may survive.
 *
 * <p>Device memory allocated by failing ranks is freed by the test thread after the pack is gone
 * (cudaFree waits for the device's queued work, which a rank must not do while a peer is stuck).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsFailureTest {
    private static final Duration JOIN_BOUND = Duration.ofSeconds(10);
    private static final int WORLD = 4;
    private static final int FAILING = 2;
    private static final int N = 840 * 4;

    @RegisterExtension
    final PackMemory memory = new PackMemory();

    /** What a failing pack left behind. */
    record Outcome(Throwable thrown, Map<Integer, Throwable> byRank, Duration elapsed) {
        Set<Throwable> suppressed() {
            Set<Throwable> set = Collections.newSetFromMap(new IdentityHashMap<>());
            set.addAll(Arrays.asList(thrown.getSuppressed()));
            return set;
        }
    }

    /**
     * Launches a pack whose work records each rank's exception, expects {@code join()} to throw
     * within {@link #JOIN_BOUND} of the launch, and checks that no pack thread survives.
     */
    static Outcome runFailing(int world, ThreadsOptions requested, Consumer<Communicator> work) {
        return runFailing(world, requested, work, JOIN_BOUND);
    }

    /** As {@link #runFailing(int, ThreadsOptions, Consumer)}, with {@code joinBound} as the hang guard. */
    static Outcome runFailing(int world, ThreadsOptions requested, Consumer<Communicator> work, Duration joinBound) {
        ThreadsOptions options = Packs.placed(world, requested);
        Map<Integer, Throwable> byRank = new ConcurrentHashMap<>();
        long start = System.nanoTime();
        ThreadsPack pack = ThreadsCommunicators.launch(world, options, comm -> {
            try {
                work.accept(comm);
            } catch (Throwable t) {
                byRank.put(comm.rank(), t);
                throw t;
            }
        });
        try {
            Throwable thrown;
            try {
                thrown = assertTimeoutPreemptively(joinBound, () -> assertThrows(Throwable.class, pack::join,
                        "join() returned normally although a rank failed"), "join() did not return within " + joinBound);
            } catch (AssertionFailedError e) {
                throw new AssertionFailedError(e.getMessage() + "; pack threads:\n  "
                        + String.join("\n  ", Packs.packThreads()), e);
            }
            Duration elapsed = Duration.ofNanos(System.nanoTime() - start);
            assertTrue(pack.hasException(), "hasException() after a failure");
            Packs.assertNoPackThreads();
            return new Outcome(thrown, byRank, elapsed);
        } finally {
            pack.close(); // bounded; releases ranks still stuck if the assertions above failed
        }
    }

    /**
     * The standard checks after rank {@code failed} threw {@code expected} (null: not known): join()
     * rethrew it; each other rank's failure is attached as a suppressed exception, is a
     * CommunicatorAbortedException and names the failed rank. A rank may have been released during
     * its init (its work never ran: the pack cancels the init of the others as soon as one rank
     * fails), so the per-rank exceptions are taken from the suppressed list; those recorded by the
     * work must be among them.
     */
    static void assertPropagated(Outcome outcome, int world, int failed, Throwable expected) {
        if (expected != null) {
            assertSame(expected, outcome.thrown(), () -> "join() must rethrow the failed rank's own exception, got "
                    + describe(outcome.thrown()));
        }
        Throwable[] suppressed = outcome.thrown().getSuppressed();
        assertEquals(world - 1, suppressed.length, () -> "one suppressed exception per other rank expected: "
                + Arrays.stream(suppressed).map(ThreadsFailureTest::describe).toList());
        for (Throwable t : suppressed) {
            assertInstanceOf(CommunicatorAbortedException.class, t, () -> describe(t));
            assertTrue(chain(t).contains("rank " + failed), () -> "does not name rank " + failed + ": " + describe(t));
        }
        Set<Throwable> attached = outcome.suppressed();
        for (Map.Entry<Integer, Throwable> entry : outcome.byRank().entrySet()) {
            if (entry.getKey() != failed) {
                assertTrue(attached.contains(entry.getValue()), () -> "rank " + entry.getKey() + "'s exception is not"
                        + " attached to the rethrown one: " + describe(entry.getValue()));
            }
        }
    }

    static String chain(Throwable t) {
        StringBuilder text = new StringBuilder();
        for (Throwable c = t; c != null; c = c.getCause()) {
            text.append(c).append(" | ");
        }
        return text.toString();
    }

    static String describe(Throwable t) {
        return t == null ? "nothing" : chain(t);
    }

    static Stream<Mode> modes() {
        return Stream.of(new Mode(false, false), new Mode(true, true));
    }

    /** Others' valid transaction: a reduce-scatter and an all-gather, executed and awaited. */
    private void validTransaction(Communicator comm) {
        DeviceTensor t = memory.fp32(N);
        DeviceTensor shard = memory.fp32(N / comm.worldSize());
        DeviceTensor full = memory.fp32(N);
        try (CudaEvent ready = CudaEvent.create(); CudaEvent signal = CudaEvent.create()) {
            ready.record(comm.stream());
            try (Transaction tx = comm.begin(ready)) {
                tx.reduceScatter(t).allGather(shard, full);
                tx.execute(signal);
            }
            comm.await(signal);
        }
    }

    // ================================================================== (a) before any communication

    enum OthersWaitIn { HOST_GATHER, TRANSACTION, BARRIER }

    /** (a) Rank 2 throws at the first line of its work while the others wait in a host gather, a transaction or a barrier. */
    @ParameterizedTest(name = "others wait in {0}")
    @EnumSource(OthersWaitIn.class)
    void aRankThrowsBeforeAnyCommunication(OthersWaitIn where) {
        for (Mode mode : modes().toList()) {
            RuntimeException boom = new IllegalStateException("rank " + FAILING + " fails before communicating (test)");
            Outcome outcome = runFailing(WORLD, mode.options(), comm -> {
                if (comm.rank() == FAILING) {
                    throw boom;
                }
                switch (where) {
                    case HOST_GATHER -> comm.allGatherBytesHost(new byte[] {(byte) comm.rank()});
                    case TRANSACTION -> validTransaction(comm);
                    case BARRIER -> comm.barrier();
                }
                comm.barrier();
                fail("rank " + comm.rank() + " passed a barrier although rank " + FAILING + " failed");
            });
            assertPropagated(outcome, WORLD, FAILING, boom);
        }
    }

    // ================================================================== (b) during init

    /**
     * (b) Init fails: with an init deadline of 1 ns the ranks cannot all join in time; the first
     * rank past its deadline fails and the others' inits are cancelled (or, if they completed, their
     * communicators aborted). There is no public knob that fails exactly one rank's init (same
     * options for every rank; the emulation injects faults only into operations), so a single-rank
     * failure right after init is {@link #aRankThrowsBeforeAnyCommunication} instead.
     */
    @Test
    void initFailsOnEveryRankWithoutWaitingForTheInitTimeout() {
        ThreadsOptions options = ThreadsOptions.defaults()
                .withCommunicator(CommunicatorOptions.defaults().withInitTimeout(Duration.ofNanos(1)));
        Outcome outcome = runFailing(WORLD, options, comm -> {
            comm.barrier();
            fail("rank " + comm.rank() + " passed a barrier although init failed");
        });
        assertInstanceOf(CommunicatorAbortedException.class, outcome.thrown(), () -> describe(outcome.thrown()));
        assertTrue(chain(outcome.thrown()).contains("init"), () -> "not an init failure: " + describe(outcome.thrown()));
        assertEquals(WORLD - 1, outcome.thrown().getSuppressed().length,
                () -> "every other rank's failure must be attached: " + Arrays.toString(outcome.thrown().getSuppressed()));
        for (Throwable t : outcome.thrown().getSuppressed()) {
            assertInstanceOf(CommunicatorAbortedException.class, t, () -> describe(t));
        }
    }

    // ================================================================== (c) in a transaction

    /** (c) Rank 2 adds an invalid command (count not divisible by the world size) while the others execute and await. */
    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aRankThrowsInATransactionWhileOthersExecute(Mode mode) {
        List<Throwable> thrownOnFailing = new CopyOnWriteArrayList<>();
        Outcome outcome = runFailing(WORLD, mode.options(), comm -> {
            if (comm.rank() == FAILING) {
                DeviceTensor bad = memory.fp32(N + 1);
                try (CudaEvent signal = CudaEvent.create(); Transaction tx = comm.begin(comm.stream())) {
                    try {
                        tx.reduceScatter(bad, ReduceOp.SUM);
                    } catch (IllegalArgumentException e) {
                        thrownOnFailing.add(e);
                        throw e;
                    }
                    tx.execute(signal);
                }
                fail("reduceScatter of " + (N + 1) + " elements in a world of " + WORLD + " was accepted");
            }
            validTransaction(comm);
            comm.barrier();
            fail("rank " + comm.rank() + " passed a barrier although rank " + FAILING + " failed");
        });
        assertEquals(1, thrownOnFailing.size());
        assertPropagated(outcome, WORLD, FAILING, thrownOnFailing.getFirst());
        assertInstanceOf(IllegalArgumentException.class, outcome.thrown());
        assertTrue(outcome.thrown().getMessage().contains("not divisible by world size " + WORLD), outcome.thrown()::getMessage);
    }

    /**
     * (c) Rank 2's execute fails inside the communicator (its ready event is an invalid handle, so
     * cudaStreamWaitEvent fails) while the others execute and await. Host only: a bogus event
     * handle is undefined behaviour on a real GPU.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aRankFailsInsideExecuteWhileOthersExecute(Mode mode) {
        Packs.assumeHost("an invalid event handle is only safe on the emulation");
        List<Throwable> thrownOnFailing = new CopyOnWriteArrayList<>();
        Outcome outcome = runFailing(WORLD, mode.options(), comm -> {
            if (comm.rank() == FAILING) {
                CudaEvent bogus = CudaEvent.wrap(0xdead0000L, comm.device());
                try (CudaEvent signal = CudaEvent.create(); Transaction tx = comm.begin(bogus)) {
                    tx.reduceScatter(memory.fp32(N)).allGather(memory.fp32(N / WORLD), memory.fp32(N));
                    try {
                        tx.execute(signal);
                    } catch (CudaException e) {
                        thrownOnFailing.add(e);
                        throw e;
                    }
                }
                fail("execute after an invalid ready event succeeded");
            }
            validTransaction(comm);
            comm.barrier();
            fail("rank " + comm.rank() + " passed a barrier although rank " + FAILING + " failed");
        });
        assertEquals(1, thrownOnFailing.size(), () -> "rank " + FAILING + ": " + describe(outcome.byRank().get(FAILING)));
        assertPropagated(outcome, WORLD, FAILING, thrownOnFailing.getFirst());
    }

    // ================================================================== (d) in a barrier

    /** (d) After a successful round, the others wait in barrier() while rank 2 throws. */
    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aRankThrowsWhileOthersAreInABarrier(Mode mode) {
        RuntimeException boom = new IllegalStateException("rank " + FAILING + " fails while the others wait (test)");
        Outcome outcome = runFailing(WORLD, mode.options(), comm -> {
            comm.barrier();
            validTransaction(comm);
            comm.barrier();
            if (comm.rank() == FAILING) {
                sleep(300); // the others are in the barrier by now
                throw boom;
            }
            comm.barrier();
            fail("rank " + comm.rank() + " passed a barrier although rank " + FAILING + " failed");
        });
        assertPropagated(outcome, WORLD, FAILING, boom);
    }

    /**
     * (d) Rank 2 fails inside barrier() itself (its thread is interrupted while it waits) while
     * ranks 0 and 1 wait in the same barrier and rank 3 has not arrived yet.
     */
    @Test
    void aRankFailsInsideABarrier() {
        Outcome outcome = runFailing(WORLD, new Mode(false, false).options(), comm -> {
            comm.barrier();
            switch (comm.rank()) {
                case FAILING -> {
                    sleep(200);
                    Thread.currentThread().interrupt();
                }
                case WORLD - 1 -> sleep(600);
                default -> { }
            }
            comm.barrier();
            fail("rank " + comm.rank() + " passed a barrier although rank " + FAILING + " failed");
        });
        Throwable failing = outcome.byRank().get(FAILING);
        assertInstanceOf(CommunicatorAbortedException.class, failing, () -> describe(failing));
        assertTrue(failing.getMessage().contains("interrupted"), failing::getMessage);
        assertPropagated(outcome, WORLD, FAILING, failing);
    }

    // ================================================================== a rank hangs or fails inside NCCL

    /**
     * Rank 1's second NCCL operation hangs (emulation fault injection); with a 2 s watchdog every
     * rank's await gets CommunicatorAbortedException within the timeout plus a margin.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aHungRankIsAbortedByTheWatchdog(Mode mode) {
        watchdogCase(mode, "hang");
    }

    /** Rank 1's second NCCL operation fails (async ncclSystemError); await() notices and the pack is aborted. */
    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aFailedNcclOperationAbortsThePack(Mode mode) {
        watchdogCase(mode, "fail");
    }

    @SuppressWarnings("try")
    private void watchdogCase(Mode mode, String fault) {
        Packs.assumeHost("JNCCL_HOST_FAULT injects the " + fault);
        Duration timeout = Duration.ofSeconds(2);
        Duration margin = Duration.ofSeconds(3);
        int world = 3;
        int faulty = 1;
        ThreadsOptions options = mode.options().withCommunicator(CommunicatorOptions.defaults().withWatchdog(timeout));
        Map<Integer, Long> abortedAfterNanos = new ConcurrentHashMap<>();
        Map<Integer, String> where = new ConcurrentHashMap<>();
        Outcome outcome;
        try (NativeEnv ignored = NativeEnv.set("JNCCL_HOST_FAULT", fault, "JNCCL_HOST_FAULT_RANK", Integer.toString(faulty),
                "JNCCL_HOST_FAULT_AT", "2")) {
            outcome = runFailing(world, options, comm -> {
                DeviceTensor t = memory.fp32(N);
                long start = System.nanoTime();
                try (CudaEvent signal = CudaEvent.create()) {
                    // Operation 1 works, but a slow rank may still be waiting for its completion when
                    // the others already fail in operation 2 and release it: timed from here.
                    where.put(comm.rank(), "operation 1");
                    checkedReduceScatter(comm);
                    // Operation 2: rank 1 hangs or fails in it; the others wait for rank 1 inside it.
                    try (Transaction tx = comm.begin(comm.stream())) {
                        tx.reduceScatter(t);
                        tx.execute(signal);
                    }
                    where.put(comm.rank(), "await");
                    comm.await(signal);
                    where.put(comm.rank(), "synchronize after await returned");
                    comm.synchronize();
                    where.put(comm.rank(), "barrier after await returned");
                    comm.barrier();
                } catch (CommunicatorAbortedException e) {
                    abortedAfterNanos.put(comm.rank(), System.nanoTime() - start);
                    throw e;
                }
                fail("rank " + comm.rank() + ": await(), synchronize() and barrier() all returned normally after"
                        + " operation 2 although rank " + faulty + " " + fault + "s in it (the asynchronous NCCL error"
                        + " went unnoticed)");
            });
        }
        // A hang is only visible to the watchdog; a failure is reported through NCCL's asynchronous
        // error, which await() checks itself before the watchdog's next poll.
        String expectedBy = fault.equals("hang") ? "watchdog" : "asynchronous error";
        assertTrue(chain(outcome.thrown()).contains(expectedBy), () -> "not aborted by the " + expectedBy + ": "
                + describe(outcome.thrown()));
        for (int r = 0; r < world; r++) {
            Throwable t = outcome.byRank().get(r);
            int rank = r;
            assertInstanceOf(CommunicatorAbortedException.class, t, () -> "rank " + rank + ": " + describe(t));
            Long nanos = abortedAfterNanos.get(r);
            assertNotNull(nanos);
            assertTrue(nanos < timeout.plus(margin).toNanos(), () -> "rank " + rank + " was released after "
                    + TimeUnit.NANOSECONDS.toMillis(nanos) + " ms (watchdog " + timeout.toMillis() + " ms + margin "
                    + margin.toMillis() + " ms)");
            if (fault.equals("hang")) {
                assertEquals("await", where.get(r), "rank " + r + " must be released from await()");
            }
        }
        Set<Throwable> suppressed = outcome.suppressed();
        for (Throwable t : outcome.byRank().values()) {
            assertTrue(t == outcome.thrown() || suppressed.contains(t), () -> describe(t) + " is not attached");
        }
        System.out.println("watchdog " + fault + " (" + mode + "): released in " + where + " after "
                + abortedAfterNanos.entrySet().stream().map(e -> e.getKey() + "=" + TimeUnit.NANOSECONDS.toMillis(e.getValue())
                + " ms").toList());
    }

    private void checkedReduceScatter(Communicator comm) {
        int n = comm.worldSize();
        float[] mine = Data.fp32(1000 + comm.rank(), N);
        DeviceTensor t = memory.fp32(N);
        DeviceMemory.wrap(t.address(), t.bytes(), comm.device()).copyFromHost(MemorySegment.ofArray(mine));
        try (CudaEvent signal = CudaEvent.create()) {
            try (Transaction tx = comm.begin(comm.stream())) {
                tx.reduceScatter(t);
                tx.execute(signal);
            }
            comm.await(signal);
        }
        List<float[]> all = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            all.add(Data.fp32(1000 + r, N));
        }
        int shard = N / n;
        float[] got = new float[shard];
        DeviceMemory.wrap(t.address(), t.bytes(), comm.device()).copyToHost(MemorySegment.ofArray(got),
                (long) comm.rank() * shard * 4);
        Verify.floats("operation 1 on rank " + comm.rank(), Data.reduce(all, ReduceOp.SUM, comm.rank() * shard, shard,
                Data.Ring.reduceScatter(comm.rank(), n)), got);
    }

    // ================================================================== memcpy mismatches

    enum Mismatch { UNMATCHED_SEND, UNMATCHED_RECV, SIZE_MISMATCH }

    static Stream<Mode> memcpySendRecvModes() {
        return Stream.of(new Mode(false, true), new Mode(true, true));
    }

    /**
     * memcpy send/recv with an unmatched send, an unmatched receive or a size mismatch between rank 0
     * and rank 1 (rank 2 uninvolved): every rank's execute throws the same IllegalStateException
     * naming both ranks (and the sizes), nothing hangs, and the pack stays usable: a correct
     * transaction afterwards works and the pack ends normally.
     */
    @ParameterizedTest(name = "{0}")
    @EnumSource(Mismatch.class)
    void memcpyMismatchIsAnErrorOnEveryRank(Mismatch mismatch) {
        for (Mode mode : memcpySendRecvModes().toList()) {
            int world = 3;
            int sent = 840;
            int received = mismatch == Mismatch.SIZE_MISMATCH ? 836 : 840;
            Map<Integer, Throwable> byRank = new ConcurrentHashMap<>();
            Packs.run(world, mode.options(), Duration.ofSeconds(20), c -> {
                DeviceTensor out = c.upload(Data.fp32(c.seed(c.rank, "mismatch"), sent));
                DeviceTensor in = c.alloc(DType.FP32, received);
                CudaEvent signal = c.event();
                Throwable thrown = null;
                try (Transaction tx = c.comm.begin(c.compute())) {
                    if (c.rank == 0 && mismatch != Mismatch.UNMATCHED_RECV) {
                        tx.send(out, 1);
                    }
                    if (c.rank == 1 && mismatch != Mismatch.UNMATCHED_SEND) {
                        tx.recv(in, 0);
                    }
                    tx.execute(signal);
                } catch (IllegalStateException e) {
                    thrown = e;
                }
                if (thrown == null) {
                    fail(c.what(mismatch + ": execute did not throw"));
                }
                byRank.put(c.rank, thrown);
                // Still usable and in step: a correct ring.
                Scenarios.sendRecvRing(c);
            });
            assertEquals(world, byRank.size());
            String message = byRank.get(0).getMessage();
            for (int r = 0; r < world; r++) {
                assertEquals(message, byRank.get(r).getMessage(), "every rank reports the same mismatch");
            }
            assertTrue(message.contains("rank 0") && message.contains("rank 1"), () -> mismatch + ": " + message);
            long sentBytes = sent * 4L;
            long receivedBytes = received * 4L;
            switch (mismatch) {
                case SIZE_MISMATCH -> assertTrue(message.contains(Long.toString(sentBytes))
                        && message.contains(Long.toString(receivedBytes)), () -> mismatch + " without both sizes: " + message);
                case UNMATCHED_SEND -> assertTrue(message.contains(Long.toString(sentBytes)),
                        () -> mismatch + " without the size of the unmatched send (" + sentBytes + " bytes): " + message);
                case UNMATCHED_RECV -> assertTrue(message.contains(Long.toString(receivedBytes)),
                        () -> mismatch + " without the size of the unmatched receive (" + receivedBytes + " bytes): " + message);
            }
        }
    }

    /**
     * memcpy send/recv: rank 1's all-to-all has another size than the others' (or rank 1 has none):
     * every rank's execute throws the same IllegalStateException naming rank 1 (and both sizes),
     * and the pack stays usable.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("memcpySendRecvModes")
    void memcpyAllToAllMismatchIsAnErrorOnEveryRank(Mode mode) {
        int world = 3;
        for (boolean missing : new boolean[] {false, true}) {
            Map<Integer, Throwable> byRank = new ConcurrentHashMap<>();
            Packs.run(world, mode.options(), Duration.ofSeconds(20), c -> {
                int count = (c.rank == 1 ? 2 : 1) * 84 * world;
                DeviceTensor send = c.upload(Data.fp32(c.seed(c.rank, "a2a.mismatch"), count));
                DeviceTensor recv = c.alloc(DType.FP32, count);
                try (Transaction tx = c.comm.begin(c.compute())) {
                    if (!(missing && c.rank == 1)) {
                        tx.allToAll(send, recv);
                    }
                    tx.execute(c.event());
                    fail(c.what("execute of mismatched all-to-alls did not throw"));
                } catch (IllegalStateException e) {
                    byRank.put(c.rank, e);
                }
                Scenarios.sendRecvRing(c); // still usable and in step
            });
            String message = byRank.get(0).getMessage();
            for (int r = 0; r < world; r++) {
                assertEquals(message, byRank.get(r).getMessage(), "every rank reports the same mismatch");
            }
            String expected = missing ? "execute: rank 1 has 0 all-to-all(s), rank 0 has 1"
                    : "execute: all-to-all #1 sends " + 2 * 84 * world * 4 + " bytes on rank 1 but " + 84 * world * 4
                    + " bytes on rank 0";
            assertEquals(expected, message);
        }
    }

    /**
     * memcpy send/recv: rank 0 sends to rank 1, but rank 1 executes no transaction at all and
     * finishes its work. That is an unmatched send too: it must end in an error naming the ranks
     * within the bound, not a hang.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("memcpySendRecvModes")
    void memcpySendToARankThatRunsNoTransactionDoesNotHang(Mode mode) {
        Outcome outcome = runFailing(2, mode.options(), comm -> {
            if (comm.rank() == 0) {
                DeviceTensor out = memory.fp32(840);
                try (CudaEvent signal = CudaEvent.create(); Transaction tx = comm.begin(comm.stream())) {
                    tx.send(out, 1);
                    tx.execute(signal);
                    comm.await(signal);
                }
            }
        });
        assertTrue(chain(outcome.thrown()).contains("rank 1"), () -> describe(outcome.thrown()));
    }

    /**
     * A rank's "work". A failing pack interrupts its ranks' user code: then the work ends early (the
     * status kept) and the rank's next jnccl call reports the pack's failure, as these tests expect.
     */
    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
