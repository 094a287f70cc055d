package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.it.ThreadsFailureTest.Outcome;
import dev.jnccl.threads.ThreadsOptions;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The host emulation refuses collectives whose ranks called different things (real NCCL completes
 * them with wrong results or hangs): at world 3, rank 2 all-reduces another count, another type,
 * with another operation or another pre-multiplied sum factor, or broadcasts from another root.
 * The emulation fails that collective on every rank with ncclInvalidUsage and a verdict naming
 * rank 2 and what each group called; jnccl sees the asynchronous error, aborts, and every rank's
 * {@link CommunicatorAbortedException} carries the verdict, which the pack's join() rethrows. A
 * matched run of the same calls still gives the right data.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class EmulationMismatchTest {
    private static final int WORLD = 3;
    private static final int ODD = 2;
    private static final int N = 4096;

    @RegisterExtension
    final PackMemory memory = new PackMemory();

    /** What rank {@link #ODD} does differently, and the verdict (after "collective #k differs: ") it must cause. */
    enum Mismatch {
        COUNT("rank 2 ncclAllReduce 4095 x float32 sum, ranks 0,1 ncclAllReduce 4096 x float32 sum"),
        DTYPE("rank 2 ncclAllReduce 4096 x int32 sum, ranks 0,1 ncclAllReduce 4096 x float32 sum"),
        OP("rank 2 ncclAllReduce 4096 x float32 max, ranks 0,1 ncclAllReduce 4096 x float32 sum"),
        SCALED_SUM_FACTOR("rank 2 ncclAllReduce 4096 x float32 premulsum(0.25), ranks 0,1 ncclAllReduce 4096 x float32"
                + " premulsum(0.5)"),
        ROOT("rank 2 ncclBroadcast 4096 x float32 root 1, ranks 0,1 ncclBroadcast 4096 x float32 root 0");

        final String verdict;

        Mismatch(String verdict) {
            this.verdict = verdict;
        }

        /** This rank's collective: the odd rank's variant on rank {@link #ODD}, the common one elsewhere. */
        void run(Communicator comm, PackMemory memory, CudaStream stream) {
            boolean odd = comm.rank() == ODD;
            switch (this) {
                case COUNT -> comm.allReduce(memory.fp32(odd ? N - 1 : N), ReduceOp.SUM, stream);
                case DTYPE -> comm.allReduce(odd ? memory.int32(N) : memory.fp32(N), ReduceOp.SUM, stream);
                case OP -> comm.allReduce(memory.fp32(N), odd ? ReduceOp.MAX : ReduceOp.SUM, stream);
                case SCALED_SUM_FACTOR -> comm.allReduce(memory.fp32(N), ReduceOp.scaledSum(odd ? 0.25 : 0.5), stream);
                case ROOT -> comm.broadcast(memory.fp32(N), odd ? 1 : 0, stream);
            }
        }
    }

    @ParameterizedTest
    @EnumSource(Mismatch.class)
    void aMismatchedCollectiveFailsEveryRankWithTheVerdict(Mismatch mismatch) {
        Packs.assumeHost("only the host emulation compares the ranks' calls");
        Outcome outcome = ThreadsFailureTest.runFailing(WORLD, ThreadsOptions.defaults(), comm -> {
            try (CudaStream stream = CudaStream.create()) {
                mismatch.run(comm, memory, stream);
                comm.synchronize();
                fail("rank " + comm.rank() + ": the mismatched collective (" + mismatch + ") and synchronize()"
                        + " returned normally");
            }
        });
        Pattern verdict = Pattern.compile("collective #\\d+ differs: " + Pattern.quote(mismatch.verdict));
        assertTrue(verdict.matcher(outcome.thrown().getMessage()).find(),
                () -> "join() rethrew no verdict: " + ThreadsFailureTest.describe(outcome.thrown()));
        Map<Integer, Throwable> byRank = outcome.byRank();
        assertEquals(WORLD, byRank.size(), () -> "every rank's work must have thrown: " + byRank.keySet());
        for (Map.Entry<Integer, Throwable> entry : byRank.entrySet()) {
            Throwable t = entry.getValue();
            // join() rethrows the pack's first failure (the abort of the first rank that saw the error)
            // with every rank's own exception attached.
            assertTrue(t == outcome.thrown() || outcome.suppressed().contains(t), () -> "rank " + entry.getKey()
                    + "'s exception is not what join() rethrew nor attached to it: " + ThreadsFailureTest.describe(t));
            assertInstanceOf(CommunicatorAbortedException.class, t, () -> ThreadsFailureTest.describe(t));
            assertTrue(verdict.matcher(t.getMessage()).find(), () -> "rank " + entry.getKey() + " (" + mismatch
                    + "): no verdict \"" + mismatch.verdict + "\" in " + ThreadsFailureTest.describe(t));
        }
    }

    /** The same calls, matched on every rank (world 3): they complete with the right data, bit for bit. */
    @Test
    void matchedCollectivesStillWork() {
        Packs.assumeHost("the companion of the mismatch tests, which only the host emulation runs");
        Packs.run(WORLD, ThreadsOptions.defaults(), c -> {
            CudaStream stream = c.compute();
            for (ReduceOp op : List.of(ReduceOp.SUM, ReduceOp.MAX, ReduceOp.scaledSum(0.5))) {
                List<float[]> in = c.fp32All("matched.allReduce." + op, N);
                DeviceTensor t = c.upload(in.get(c.rank));
                c.comm.allReduce(t, op, stream);
                stream.synchronize();
                float[] expected = Data.reduce(in, op, 0, N, Data.Ring.allReduce(N, WORLD, 4));
                Verify.floats(c.what("allReduce FP32 " + op), expected, c.floats(t));
            }
            List<int[]> ints = c.int32All("matched.allReduce.int32", N);
            DeviceTensor i = c.upload(ints.get(c.rank));
            c.comm.allReduce(i, ReduceOp.SUM, stream);
            stream.synchronize();
            Verify.ints(c.what("allReduce INT32 SUM"), Data.reduceInt(ints, ReduceOp.SUM, 0, N), c.ints(i));
            for (int root = 0; root < WORLD; root++) {
                List<float[]> in = c.fp32All("matched.broadcast." + root, N);
                DeviceTensor t = c.upload(in.get(c.rank));
                c.comm.broadcast(t, root, stream);
                stream.synchronize();
                Verify.floats(c.what("broadcast from " + root), in.get(root), c.floats(t));
            }
        });
    }
}
