package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DeviceTensor;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.it.Packs.Mode;
import dev.jnccl.it.ThreadsFailureTest.Outcome;
import dev.jnccl.testsupport.NativeEnv;
import dev.jnccl.threads.ThreadsOptions;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Every host-side wait of threads mode ends: a rank that never arrives at a barrier, a host
 * gather, a copy-engine transaction or a split is reported by name at the deadline (the watchdog's
 * timeout; the init timeout for split), and an interrupted wait aborts the communicator with the
 * {@link InterruptedException} as the cause and the interrupt status kept. The pack's failure then
 * interrupts the user code of the other ranks (here: the absent rank, parked on a latch), so
 * nothing waits for the full 60 s it would otherwise.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsDeadlineTest {
    private static final int WORLD = 3;
    private static final int ABSENT = 2;
    private static final Duration WATCHDOG = Duration.ofSeconds(1);
    /** Generous for a loaded 2-core machine; far below the 60 s the absent rank would keep the others. */
    private static final Duration MARGIN = Duration.ofSeconds(4);
    private static final long ABSENT_WAIT_SECONDS = 60;
    private static final int N = 840;

    @RegisterExtension
    final PackMemory memory = new PackMemory();

    static List<Mode> modes() {
        return ThreadsFailureTest.modes().toList();
    }

    private static ThreadsOptions watched(Mode mode) {
        return mode.options().withCommunicator(CommunicatorOptions.defaults().withWatchdog(WATCHDOG));
    }

    /** The absent rank parks on a latch the test never counts down: only the pack's interrupt ends it early. */
    private static void stayAway(Map<Integer, Throwable> absentSaw) {
        try {
            boolean released = new CountDownLatch(1).await(ABSENT_WAIT_SECONDS, TimeUnit.SECONDS);
            absentSaw.put(ABSENT, new AssertionError("the absent rank was not interrupted (latch released: " + released
                    + ")"));
        } catch (InterruptedException e) {
            absentSaw.put(ABSENT, e);
            Thread.currentThread().interrupt();
        }
    }

    private void expectReleasedNamingTheAbsentRank(String what, Consumer<Communicator> present, Duration bound,
                                                   ThreadsOptions options) {
        Map<Integer, Long> releasedAfter = new ConcurrentHashMap<>();
        Map<Integer, Throwable> absentSaw = new ConcurrentHashMap<>();
        Outcome outcome = ThreadsFailureTest.runFailing(WORLD, options, comm -> {
            if (comm.rank() == ABSENT) {
                stayAway(absentSaw);
                return;
            }
            long start = System.nanoTime();
            try {
                present.accept(comm);
            } finally {
                releasedAfter.put(comm.rank(), System.nanoTime() - start);
            }
        });
        for (int r = 0; r < WORLD; r++) {
            if (r == ABSENT) {
                continue;
            }
            int rank = r;
            Throwable t = outcome.byRank().get(r);
            assertInstanceOf(CommunicatorAbortedException.class, t, () -> what + ": rank " + rank + " got " + t);
            String chain = ThreadsFailureTest.chain(t);
            assertTrue(chain.contains("rank " + ABSENT + " did not arrive"), () -> what + ": rank " + rank
                    + "'s exception does not name the absent rank: " + chain);
            long millis = TimeUnit.NANOSECONDS.toMillis(releasedAfter.get(r));
            assertTrue(millis < bound.plus(MARGIN).toMillis(), () -> what + ": rank " + rank + " released after "
                    + millis + " ms (bound " + bound.toMillis() + " ms + " + MARGIN.toMillis() + " ms)");
        }
        assertInstanceOf(InterruptedException.class, absentSaw.get(ABSENT),
                what + ": the pack's failure interrupts the user code of the rank that stayed away");
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aBarrierARankNeverReachesEndsAtTheWatchdogTimeout(Mode mode) {
        expectReleasedNamingTheAbsentRank("barrier", Communicator::barrier, WATCHDOG, watched(mode));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aHostGatherARankNeverReachesEndsAtTheWatchdogTimeout(Mode mode) {
        expectReleasedNamingTheAbsentRank("allGatherBytesHost", comm -> comm.allGatherBytesHost(new byte[] {1}),
                WATCHDOG, watched(mode));
    }

    /** The copy-engine transports start each transaction with a host exchange: bounded like a barrier. */
    @Test
    void aCopyEngineTransactionARankNeverExecutesEndsAtTheWatchdogTimeout() {
        expectReleasedNamingTheAbsentRank("copy-engine all-gather", comm -> {
            DeviceTensor full = memory.fp32(N);
            DeviceTensor shard = full.shard(comm.rank(), WORLD);
            try (CudaEvent signal = CudaEvent.create(); Transaction tx = comm.begin(comm.stream())) {
                tx.allGather(shard, full);
                tx.execute(signal);
            }
        }, WATCHDOG, watched(new Mode(true, true)));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aSplitARankNeverJoinsEndsAtTheInitTimeout(Mode mode) {
        Duration init = Duration.ofSeconds(1);
        ThreadsOptions options = mode.options().withCommunicator(CommunicatorOptions.defaults().withInitTimeout(init));
        expectReleasedNamingTheAbsentRank("split", comm -> comm.split(0, comm.rank()), init, options);
    }

    /**
     * An interrupted barrier aborts: the interrupted rank keeps its interrupt status and sees the
     * InterruptedException as the cause, the rank waiting with it is released naming it, and the
     * rank that stayed away (so that the barrier cannot complete) is interrupted by the pack.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void anInterruptedBarrierAbortsTheCommunicatorAndReleasesThePeers(Mode mode) {
        int interrupted = 1;
        CountDownLatch inBarrier = new CountDownLatch(1);
        Map<Integer, Boolean> statusKept = new ConcurrentHashMap<>();
        Map<Integer, Thread> threads = new ConcurrentHashMap<>();
        Map<Integer, Throwable> absentSaw = new ConcurrentHashMap<>();
        Thread interrupter = Thread.ofPlatform().daemon().start(() -> {
            try {
                inBarrier.await();
                Thread.sleep(300); // inside the barrier by now, which rank 2's absence keeps open
                threads.get(interrupted).interrupt();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        Outcome outcome = ThreadsFailureTest.runFailing(WORLD, mode.options(), comm -> {
            switch (comm.rank()) {
                case ABSENT -> stayAway(absentSaw);
                case 1 -> {
                    threads.put(interrupted, Thread.currentThread());
                    inBarrier.countDown();
                    try {
                        comm.barrier();
                    } finally {
                        statusKept.put(interrupted, Thread.currentThread().isInterrupted());
                    }
                }
                default -> comm.barrier();
            }
        });
        assertTrue(join(interrupter));
        Throwable own = outcome.byRank().get(interrupted);
        assertInstanceOf(CommunicatorAbortedException.class, own);
        assertTrue(causes(own, InterruptedException.class), () -> "no InterruptedException in the causes of " + own);
        assertTrue(own.getMessage().contains("rank " + ABSENT + " had not arrived"), own::getMessage);
        assertEquals(Boolean.TRUE, statusKept.get(interrupted), "the interrupt status is kept");
        Throwable peer = outcome.byRank().get(0);
        assertInstanceOf(CommunicatorAbortedException.class, peer);
        assertTrue(ThreadsFailureTest.chain(peer).contains("rank " + interrupted), () -> "rank 0 is not told which"
                + " rank failed: " + ThreadsFailureTest.chain(peer));
        assertInstanceOf(InterruptedException.class, absentSaw.get(ABSENT), "the pack interrupts user code");
    }

    /**
     * An interrupt while execute waits in the launch-queue throttle aborts the communicator (the
     * transaction never ran, so the others would wait for it); what the rank closes afterwards
     * closes promptly.
     */
    @Test
    void anInterruptWhileThrottledAbortsAndEverythingClosesPromptly() {
        int fast = 0;
        ThreadsOptions options = ThreadsOptions.defaults().withMaxLead(2);
        CountDownLatch throttled = new CountDownLatch(1);
        Map<Integer, Thread> threads = new ConcurrentHashMap<>();
        Map<Integer, Long> closeMillis = new ConcurrentHashMap<>();
        Map<Integer, Boolean> statusKept = new ConcurrentHashMap<>();
        Thread interrupter = Thread.ofPlatform().daemon().start(() -> {
            try {
                throttled.await();
                Thread.sleep(500); // rank 0 is held by the throttle by now
                threads.get(fast).interrupt();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        Outcome outcome = ThreadsFailureTest.runFailing(2, options, comm -> {
            if (comm.rank() != fast) {
                DeviceTensor t = memory.fp32(N);
                warmUp(comm, t);
                stayAway(new ConcurrentHashMap<>()); // never executes: rank 0 runs ahead and is throttled
                return;
            }
            threads.put(fast, Thread.currentThread());
            dev.jnccl.cuda.DeviceMemory own = dev.jnccl.cuda.DeviceMemory.allocate(dev.jnccl.DType.FP32, N);
            warmUp(comm, own.tensor(dev.jnccl.DType.FP32));
            try {
                for (int i = 0; i < 100; i++) {
                    if (i == 0) {
                        throttled.countDown(); // the third one waits: maxLead 2, rank 1 stays at its warm-up
                    }
                    try (Transaction tx = comm.begin(comm.stream())) {
                        tx.allReduce(own.tensor(dev.jnccl.DType.FP32), dev.jnccl.ReduceOp.SUM);
                        tx.execute(null);
                    }
                }
            } finally {
                statusKept.put(fast, Thread.interrupted());
                long start = System.nanoTime();
                own.close();
                closeMillis.put(fast, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start));
            }
        });
        assertTrue(join(interrupter));
        Throwable t = outcome.byRank().get(fast);
        assertInstanceOf(CommunicatorAbortedException.class, t);
        assertTrue(causes(t, InterruptedException.class), () -> "no InterruptedException in the causes of " + t);
        assertEquals(Boolean.TRUE, statusKept.get(fast), "the interrupt status is kept");
        assertNotNull(closeMillis.get(fast));
        assertTrue(closeMillis.get(fast) < 2_000, "DeviceMemory.close took " + closeMillis.get(fast) + " ms");
    }

    /**
     * A thread held inside an enqueue (real NCCL connects ranks there; the emulation's
     * {@code hang-enqueue} holds it until an abort) cannot see its interrupt: the watchdog sees it and
     * aborts, well before its timeout, so the call ends with the InterruptedException as the cause and
     * the status kept. NCCL's transport only: the copy engines' exchange waits for the peer before
     * anything reaches NCCL, an ordinary interruptible host-side wait.
     */
    @Test
    @SuppressWarnings("try")
    void anInterruptReachesAThreadHeldInsideAnEnqueue() {
        Mode mode = new Mode(false, false);
        Packs.assumeHost("JNCCL_HOST_FAULT=hang-enqueue holds the thread inside ncclGroupEnd");
        int held = 0;
        CountDownLatch executing = new CountDownLatch(1);
        Map<Integer, Thread> threads = new ConcurrentHashMap<>();
        Map<Integer, Boolean> statusKept = new ConcurrentHashMap<>();
        Map<Integer, Long> endedAfterMillis = new ConcurrentHashMap<>();
        long[] interruptedAt = new long[1];
        Thread interrupter = Thread.ofPlatform().daemon().start(() -> {
            try {
                executing.await();
                Thread.sleep(500); // inside ncclGroupEnd by now
                interruptedAt[0] = System.nanoTime();
                threads.get(held).interrupt();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        Outcome outcome;
        try (NativeEnv ignored = NativeEnv.set("JNCCL_HOST_FAULT", "hang-enqueue", "JNCCL_HOST_FAULT_RANK",
                Integer.toString(held), "JNCCL_HOST_FAULT_AT", "1")) {
            outcome = ThreadsFailureTest.runFailing(2, mode.options(), comm -> {
                if (comm.rank() != held) {
                    stayAway(new ConcurrentHashMap<>());
                    return;
                }
                threads.put(held, Thread.currentThread());
                DeviceTensor t = memory.fp32(N);
                try (Transaction tx = comm.begin(comm.stream())) {
                    tx.reduceScatter(t);
                    executing.countDown();
                    tx.execute(null);
                } finally {
                    endedAfterMillis.put(held, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - interruptedAt[0]));
                    statusKept.put(held, Thread.currentThread().isInterrupted());
                }
            });
        }
        assertTrue(join(interrupter));
        Throwable t = outcome.byRank().get(held);
        assertInstanceOf(CommunicatorAbortedException.class, t);
        assertTrue(causes(t, InterruptedException.class), () -> "no InterruptedException in the causes of " + t);
        assertTrue(t.getMessage().contains("interrupted while inside NCCL"), t::getMessage);
        assertEquals(Boolean.TRUE, statusKept.get(held), "the interrupt status is kept");
        // The watchdog polls every 100 ms and its timeout is 10 minutes: only the interrupt ends it this early.
        assertTrue(endedAfterMillis.get(held) < 5_000, "the held execute ended " + endedAfterMillis.get(held)
                + " ms after its interrupt");
    }

    private static boolean join(Thread thread) {
        try {
            return thread.join(Duration.ofSeconds(30));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    private static boolean causes(Throwable t, Class<? extends Throwable> type) {
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (type.isInstance(c)) {
                return true;
            }
        }
        return false;
    }

    /**
     * A rank waiting 3 s for a slow peer, in a collective (await) and in a barrier, uses a small
     * fraction of a core: the waits park instead of spinning.
     */
    @ParameterizedTest(name = "{0}")
    @MethodSource("modes")
    void aRankWaitingForASlowPeerUsesLittleCpu(Mode mode) {
        long slowMillis = 3_000;
        Map<String, Double> share = new ConcurrentHashMap<>();
        java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory.getThreadMXBean();
        dev.jnccl.threads.ThreadsCommunicators.run(2, Packs.placed(2, mode.options()), comm -> {
            DeviceTensor t = memory.fp32(N);
            try (CudaEvent signal = CudaEvent.create()) {
                warmUp(comm, t);
                if (comm.rank() == 1) {
                    sleep(slowMillis);
                }
                long cpu = mx.getCurrentThreadCpuTime();
                long wall = System.nanoTime();
                try (Transaction tx = comm.begin(comm.stream())) {
                    tx.reduceScatter(t);
                    tx.execute(signal);
                }
                comm.await(signal);
                if (comm.rank() == 0) {
                    share.put("await", (mx.getCurrentThreadCpuTime() - cpu) / (double) (System.nanoTime() - wall));
                } else {
                    sleep(slowMillis);
                }
                cpu = mx.getCurrentThreadCpuTime();
                wall = System.nanoTime();
                comm.barrier();
                if (comm.rank() == 0) {
                    share.put("barrier", (mx.getCurrentThreadCpuTime() - cpu) / (double) (System.nanoTime() - wall));
                }
            }
        });
        for (String wait : List.of("await", "barrier")) {
            assertNotNull(share.get(wait), wait);
            assertTrue(share.get(wait) < 0.10, () -> wait + " used " + Math.round(share.get(wait) * 100)
                    + " % of a core while waiting for a slow peer");
        }
    }

    /**
     * One collective on every rank first: real NCCL connects the ranks lazily, inside the first
     * collective's enqueue, and spins there (in NCCL, not interruptible) until the peer comes; the
     * waits under test are those of a running job, after that.
     */
    private static void warmUp(Communicator comm, DeviceTensor t) {
        try (CudaEvent done = CudaEvent.create(); Transaction tx = comm.begin(comm.stream())) {
            tx.reduceScatter(t);
            tx.execute(done);
            comm.await(done);
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** An interrupted await has no effect: JncclInterruptedException, the status kept, the communicator usable. */
    @Test
    void anInterruptedAwaitEndsWithoutEffect() {
        Map<String, Object> seen = new ConcurrentHashMap<>();
        dev.jnccl.threads.ThreadsCommunicators.run(2, Packs.placed(2, ThreadsOptions.defaults()), comm -> {
            DeviceTensor t = memory.fp32(N);
            try (CudaEvent signal = CudaEvent.create()) {
                warmUp(comm, t);
                if (comm.rank() == 1) {
                    sleep(1_500); // rank 0 waits for this rank's reduce-scatter meanwhile
                } else {
                    Thread self = Thread.currentThread();
                    Thread.ofPlatform().daemon().start(() -> {
                        sleep(300);
                        self.interrupt();
                    });
                }
                try (Transaction tx = comm.begin(comm.stream())) {
                    tx.reduceScatter(t);
                    tx.execute(signal);
                }
                if (comm.rank() == 0) {
                    long start = System.nanoTime();
                    seen.put("thrown", assertThrows(dev.jnccl.JncclInterruptedException.class, () -> comm.await(signal)));
                    seen.put("millis", TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start));
                    seen.put("status", Thread.interrupted()); // cleared here: the rank goes on
                }
                comm.await(signal); // the collective completes once rank 1 joins: no effect
                comm.barrier();
                seen.put("aborted-" + comm.rank(), comm.isAborted());
            }
        });
        assertInstanceOf(InterruptedException.class, ((Throwable) seen.get("thrown")).getCause());
        assertTrue((Long) seen.get("millis") < 1_000, "await ended " + seen.get("millis") + " ms after the interrupt");
        assertEquals(Boolean.TRUE, seen.get("status"), "the interrupt status is kept");
        assertEquals(Boolean.FALSE, seen.get("aborted-0"));
        assertEquals(Boolean.FALSE, seen.get("aborted-1"));
    }

    @Test
    void aTransactionBelongsToTheThreadThatBeganIt() {
        java.util.concurrent.atomic.AtomicReference<Throwable> otherFailed = new java.util.concurrent.atomic.AtomicReference<>();
        dev.jnccl.threads.ThreadsCommunicators.run(1, ThreadsOptions.defaults(), comm -> {
            try (Transaction tx = comm.begin(comm.stream())) {
                DeviceTensor t = memory.fp32(N);
                Thread other = Thread.ofPlatform().name("not-the-owner").start(() -> {
                    try {
                        IllegalStateException e = assertThrows(IllegalStateException.class,
                                () -> tx.allReduce(t, dev.jnccl.ReduceOp.SUM));
                        assertTrue(e.getMessage().contains("\"jnccl-rank-0\"") && e.getMessage().contains(
                                "\"not-the-owner\""), e.getMessage());
                        assertThrows(IllegalStateException.class, () -> tx.execute(null));
                        assertThrows(IllegalStateException.class, tx::close);
                    } catch (Throwable failure) {
                        otherFailed.set(failure);
                    }
                });
                try {
                    other.join();
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
                assertTrue(tx.isOpen(), "the other thread's calls had no effect");
                assertEquals(0, tx.size());
            }
        });
        if (otherFailed.get() != null) {
            throw new AssertionError("from the other thread", otherFailed.get());
        }
    }
}
