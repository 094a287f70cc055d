package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.Transaction;
import dev.jnccl.UniqueId;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.it.ThreadsFailureTest.Outcome;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The consistency check ({@code CommunicatorOptions.withConsistencyChecks(true)}, or
 * {@code jnccl.debug=detail}) in threads mode at world 3: rank 1 calls a collective that differs
 * from ranks 0 and 2 in its count, type, reduction or root (all-reduce, broadcast, reduce-scatter;
 * convenience operations and transactions), or receives another size than its peer sends, or
 * replays another graph. Every rank's exception and the pack's join() carry the check's verdict
 * naming rank 1, the field and both values; the failure comes before NCCL ran the step, which the
 * emulation would otherwise refuse with its own "collective #N differs" verdict (that verdict is
 * what the same mismatch gives with the check off, its default). Matching steps of every kind still
 * give the right data with the check on.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsConsistencyCheckTest {
    private static final int WORLD = 3;
    private static final int ODD = 1;
    private static final int N = 4096;
    /** The reduce-scatter's slot (4095 elements split in 3). */
    private static final int SLOT = 1365;
    private static final String REFUSED = " refused before NCCL ran it (consistency check, jnccl.debug=detail): ";
    /** The emulation's own verdict on a mismatched collective that reached it. */
    private static final Pattern EMULATION = Pattern.compile("collective #\\d+ differs");

    @RegisterExtension
    final PackMemory memory = new PackMemory();

    private static ThreadsOptions checked() {
        return ThreadsOptions.defaults().withCommunicator(CommunicatorOptions.defaults().withConsistencyChecks(true));
    }

    /** What rank {@link #ODD} does differently, and the check's verdict after "transaction #N ... : ". */
    enum Mismatch {
        ALL_REDUCE_COUNT("the count of collective 1 differs: rank 1 all-reduces 4095 FP32 with SUM; ranks 0 and 2"
                + " all-reduce 4096 FP32 with SUM"),
        ALL_REDUCE_DTYPE("the dtype of collective 1 differs: rank 1 all-reduces 4096 INT32 with SUM; ranks 0 and 2"
                + " all-reduce 4096 FP32 with SUM"),
        ALL_REDUCE_OP("the op of collective 1 differs: rank 1 all-reduces 4096 FP32 with MAX; ranks 0 and 2"
                + " all-reduce 4096 FP32 with SUM"),
        ALL_REDUCE_SCALED_SUM_FACTOR("the op of collective 1 differs: rank 1 all-reduces 4096 FP32 with"
                + " SCALED_SUM(0.25); ranks 0 and 2 all-reduce 4096 FP32 with SCALED_SUM(0.5)"),
        BROADCAST_COUNT("the count of collective 1 differs: rank 1 broadcasts 4095 FP32 from rank 0; ranks 0 and 2"
                + " broadcast 4096 FP32 from rank 0"),
        BROADCAST_DTYPE("the dtype of collective 1 differs: rank 1 broadcasts 4096 INT32 from rank 0; ranks 0 and 2"
                + " broadcast 4096 FP32 from rank 0"),
        BROADCAST_ROOT("the root of collective 1 differs: rank 1 broadcasts 4096 FP32 from rank 1; ranks 0 and 2"
                + " broadcast 4096 FP32 from rank 0"),
        REDUCE_SCATTER_COUNT("the count of collective 2 differs: rank 1 reduce-scatters 1364 FP32 per rank with SUM;"
                + " ranks 0 and 2 reduce-scatter 1365 FP32 per rank with SUM"),
        REDUCE_SCATTER_DTYPE("the dtype of collective 2 differs: rank 1 reduce-scatters 1365 INT32 per rank with SUM;"
                + " ranks 0 and 2 reduce-scatter 1365 FP32 per rank with SUM"),
        REDUCE_SCATTER_OP("the op of collective 2 differs: rank 1 reduce-scatters 1365 FP32 per rank with MIN;"
                + " ranks 0 and 2 reduce-scatter 1365 FP32 per rank with SUM"),
        SEND_RECV_COUNT("the count of send 1 from rank 0 to rank 1 differs: rank 0 sends 4096 FP32; rank 1 receives"
                + " 4095 FP32");

        final String verdict;

        Mismatch(String verdict) {
            this.verdict = verdict;
        }

        /** This rank's step: the odd rank's variant on rank {@link #ODD}, the common one elsewhere. */
        void run(Communicator comm, PackMemory memory, CudaStream stream) {
            boolean odd = comm.rank() == ODD;
            switch (this) {
                case ALL_REDUCE_COUNT -> comm.allReduce(memory.fp32(odd ? N - 1 : N), ReduceOp.SUM, stream);
                case ALL_REDUCE_DTYPE -> comm.allReduce(odd ? memory.int32(N) : memory.fp32(N), ReduceOp.SUM, stream);
                case ALL_REDUCE_OP -> comm.allReduce(memory.fp32(N), odd ? ReduceOp.MAX : ReduceOp.SUM, stream);
                case ALL_REDUCE_SCALED_SUM_FACTOR -> comm.allReduce(memory.fp32(N),
                        ReduceOp.scaledSum(odd ? 0.25 : 0.5), stream);
                case BROADCAST_COUNT -> comm.broadcast(memory.fp32(odd ? N - 1 : N), 0, stream);
                case BROADCAST_DTYPE -> comm.broadcast(odd ? memory.int32(N) : memory.fp32(N), 0, stream);
                case BROADCAST_ROOT -> comm.broadcast(memory.fp32(N), odd ? 1 : 0, stream);
                case REDUCE_SCATTER_COUNT -> reduceScatter(comm, stream, memory,
                        memory.fp32(3L * (odd ? SLOT - 1 : SLOT)),
                        ReduceOp.SUM);
                case REDUCE_SCATTER_DTYPE -> reduceScatter(comm, stream, memory, odd ? memory.int32(3L * SLOT)
                        : memory.fp32(3L * SLOT), ReduceOp.SUM);
                case REDUCE_SCATTER_OP -> reduceScatter(comm, stream, memory, memory.fp32(3L * SLOT),
                        odd ? ReduceOp.MIN : ReduceOp.SUM);
                case SEND_RECV_COUNT -> ring(comm, stream, memory);
            }
        }

        /** A transaction whose first command matches everywhere, its second (the reduce-scatter) not. */
        private static void reduceScatter(Communicator comm, CudaStream stream, PackMemory memory, DeviceTensor src,
                                          ReduceOp op) {
            DeviceTensor first = memory.fp32(3);
            try (Transaction tx = comm.begin(stream)) {
                tx.allReduce(first, first, ReduceOp.SUM).reduceScatter(src, src.shard(comm.rank(), 3), op);
                tx.execute(null);
            }
        }

        /** Each rank sends 4096 to the next; rank 1 receives only 4095 from rank 0. */
        private static void ring(Communicator comm, CudaStream stream, PackMemory memory) {
            int rank = comm.rank();
            try (Transaction tx = comm.begin(stream)) {
                tx.send(memory.fp32(N), (rank + 1) % WORLD).recv(memory.fp32(rank == ODD ? N - 1 : N),
                        (rank + WORLD - 1) % WORLD);
                tx.execute(null);
            }
        }
    }

    @ParameterizedTest
    @EnumSource(Mismatch.class)
    void aMismatchIsCaughtBeforeNcclOnEveryRank(Mismatch mismatch) {
        Outcome outcome = runMismatched(checked(), (comm, stream) -> mismatch.run(comm, memory, stream));
        assertVerdictEverywhere(outcome, Pattern.compile("transaction #\\d+" + Pattern.quote(REFUSED + mismatch.verdict)));
    }

    /**
     * Every rank captures two graphs alike (checked as captured), then rank 1 replays the other one:
     * the replay's check compares the commands replayed (graph ids differ between ranks).
     */
    @Test
    void aReplayOfAnotherGraphIsCaughtBeforeItIsLaunched() {
        Outcome outcome = runMismatched(checked(), (comm, stream) -> {
            DeviceTensor big = memory.fp32(N);
            DeviceTensor small = memory.fp32(N / 2);
            try (CudaGraph a = CudaGraph.capture(stream, () -> comm.allReduce(big, ReduceOp.SUM, stream));
                 CudaGraph b = CudaGraph.capture(stream, () -> comm.allReduce(small, ReduceOp.SUM, stream))) {
                comm.launch(comm.rank() == ODD ? b : a, stream);
                stream.synchronize();
            }
        });
        assertVerdictEverywhere(outcome, Pattern.compile("replay of graph #\\d+ on rank 0, replay of graph #\\d+ on rank 1, replay of graph"
                + " #\\d+ on rank 2" + Pattern.quote(REFUSED
                + "the count of collective 1 differs: rank 1 all-reduces 2048 FP32 with SUM; ranks 0 and 2 all-reduce"
                + " 4096 FP32 with SUM")));
    }

    /** Off by default: the same mismatch reaches the emulation, which refuses it with its own verdict. */
    @Test
    void offByDefaultTheMismatchReachesNccl() {
        Packs.assumeHost("only the host emulation refuses a mismatched collective by itself");
        Outcome outcome = runMismatched(ThreadsOptions.defaults(),
                (comm, stream) -> Mismatch.ALL_REDUCE_COUNT.run(comm, memory, stream));
        String message = outcome.thrown().getMessage();
        assertTrue(EMULATION.matcher(message).find() && message.contains("rank 1 ncclAllReduce 4095"),
                () -> "not the emulation's verdict: " + ThreadsFailureTest.describe(outcome.thrown()));
        assertFalse(message.contains("consistency check"), message);
    }

    /** The system property alone turns the check on (any case), as JNCCL_DEBUG does when it is unset. */
    @Test
    void theSystemPropertyTurnsItOn() {
        Outcome outcome = withProperty("Detail", () -> runMismatched(ThreadsOptions.defaults(),
                (comm, stream) -> Mismatch.BROADCAST_ROOT.run(comm, memory, stream)));
        assertVerdictEverywhere(outcome, Pattern.compile("transaction #\\d+" + Pattern.quote(REFUSED
                + Mismatch.BROADCAST_ROOT.verdict)));
    }

    /** Another value is refused when the communicators are created, naming the setting and its values. */
    @Test
    void anotherValueOfThePropertyIsRefusedAtCreation() {
        Throwable thrown = withProperty("verbose", () -> assertThrows(Throwable.class,
                () -> ThreadsCommunicators.run(WORLD, Packs.placed(WORLD, ThreadsOptions.defaults()),
                        comm -> fail("created"))));
        assertTrue(ThreadsFailureTest.chain(thrown).contains("jnccl.debug (system property) is \"verbose\": expected"
                + " detail or off (any case), or unset"), () -> ThreadsFailureTest.describe(thrown));
        Packs.assertNoPackThreads();
    }

    /**
     * Matching steps with the check on: every transaction command, every convenience operation and
     * rooted, uneven and point-to-point kind, splits, captured graphs and their replays, checked
     * element by element with random data.
     */
    @Test
    void matchingStepsOfEveryKindStillRunWithTheRightData() {
        Packs.run(WORLD, checked(), Duration.ofSeconds(110), c -> {
            Scenarios.transactionCommands(c);
            Scenarios.convenienceOperations(c);
            Scenarios.mixedTransaction(c);
            Scenarios.sendOnly(c);
            Scenarios.hostHelpers(c);
            CollectiveScenarios.outOfPlaceReductions(c);
            CollectiveScenarios.reduceToEveryRoot(c);
            CollectiveScenarios.gatherAndScatterOfEveryDtype(c);
            CollectiveScenarios.unevenAllToAllOfEveryDtype(c);
            CollectiveScenarios.unevenAllGatherOfEveryDtype(c);
            OpsScenarios.broadcastFromEveryRoot(c);
            OpsScenarios.sendAndReceiveToItselfAloneAndInRings(c);
            OpsScenarios.allToAllOfEveryDtype(c);
            OpsScenarios.splitIntoGroups(c);
            GraphScenarios.capturedSteps(c);
            assertTrue(c.comm.options().consistencyChecks(), c.what("the check is off"));
            assertFalse(c.comm.isAborted(), () -> c.what("aborted: " + c.comm.abortReason()));
        });
    }

    /**
     * initRank's host side runs over the communicator's own NCCL, so the check is skipped there (a
     * WARN line at creation) rather than refused or recursing: with it asked for, host calls and a
     * matched all-reduce (random data, checked) still work.
     */
    @Test
    void initRankSkipsTheCheck() throws Exception {
        int world = 2;
        long seed = Packs.newSeed();
        UniqueId id = UniqueId.generate();
        CommunicatorOptions options = CommunicatorOptions.defaults().withConsistencyChecks(true);
        List<Thread> threads = new ArrayList<>();
        AtomicReferenceArray<Throwable> errors = new AtomicReferenceArray<>(world);
        for (int rank = 0; rank < world; rank++) {
            int r = rank;
            threads.add(Thread.ofPlatform().name("consistency-init-rank-" + r).start(() -> {
                try (Communicator comm = Communicator.initRank(id, r, world, r % Cuda.deviceCount(), options);
                     RankContext c = new RankContext(comm, seed)) {
                    comm.barrier();
                    List<float[]> in = c.fp32All("initRank.allReduce", N);
                    DeviceTensor t = c.upload(in.get(r));
                    comm.allReduce(t, ReduceOp.SUM, c.compute());
                    c.compute().synchronize();
                    Verify.floats(c.what("allReduce over initRank"), Data.reduce(in, ReduceOp.SUM, 0, N,
                            Data.Ring.allReduce(N, world, 4)), c.floats(t), c.exact, Data.magnitude(in, 0, N));
                    assertEquals(world, comm.allGatherBytesHost(new byte[] {(byte) r}).size());
                } catch (Throwable e) {
                    errors.set(r, e);
                }
            }));
        }
        for (Thread thread : threads) {
            assertTrue(thread.join(Duration.ofSeconds(60)), thread.getName() + " did not finish");
        }
        for (int r = 0; r < world; r++) {
            if (errors.get(r) != null) {
                throw new AssertionError("rank " + r + " failed", errors.get(r));
            }
        }
    }

    // ------------------------------------------------------------------ helpers

    interface Step {
        void run(Communicator comm, CudaStream stream);
    }

    private static Outcome runMismatched(ThreadsOptions options, Step step) {
        return ThreadsFailureTest.runFailing(WORLD, options, comm -> {
            try (CudaStream stream = CudaStream.create()) {
                step.run(comm, stream);
                comm.synchronize();
                fail("rank " + comm.rank() + ": the mismatched step and synchronize() returned normally");
            }
        });
    }

    /**
     * join() rethrew the verdict, and every rank's own exception (attached to it, or it) is a
     * CommunicatorAbortedException with the verdict and without the emulation's.
     */
    private static void assertVerdictEverywhere(Outcome outcome, Pattern verdict) {
        assertTrue(verdict.matcher(outcome.thrown().getMessage()).find(),
                () -> "join() rethrew no verdict " + verdict + ": " + ThreadsFailureTest.describe(outcome.thrown()));
        Map<Integer, Throwable> byRank = outcome.byRank();
        assertEquals(WORLD, byRank.size(), () -> "every rank's work must have thrown: " + byRank.keySet());
        for (Map.Entry<Integer, Throwable> entry : byRank.entrySet()) {
            Throwable t = entry.getValue();
            assertTrue(t == outcome.thrown() || outcome.suppressed().contains(t), () -> "rank " + entry.getKey()
                    + "'s exception is not what join() rethrew nor attached to it: " + ThreadsFailureTest.describe(t));
            assertInstanceOf(CommunicatorAbortedException.class, t, () -> ThreadsFailureTest.describe(t));
            assertTrue(verdict.matcher(t.getMessage()).find(), () -> "rank " + entry.getKey() + ": no verdict "
                    + verdict + " in " + ThreadsFailureTest.describe(t));
            assertFalse(EMULATION.matcher(ThreadsFailureTest.chain(t)).find(), () -> "rank " + entry.getKey()
                    + ": the step reached NCCL: " + ThreadsFailureTest.describe(t));
        }
    }

    private static <T> T withProperty(String value, java.util.function.Supplier<T> body) {
        String saved = System.getProperty("jnccl.debug");
        System.setProperty("jnccl.debug", value);
        try {
            return body.get();
        } finally {
            if (saved == null) {
                System.clearProperty("jnccl.debug");
            } else {
                System.setProperty("jnccl.debug", saved);
            }
        }
    }
}
