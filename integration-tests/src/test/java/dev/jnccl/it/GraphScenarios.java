package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import java.util.List;

/**
 * Scenarios of one rank for CUDA graphs, run by every rank of a threads pack or an MPI job: steps
 * of K = 1, 8 and 32 transactions (reduce-scatter, all-gather, send/recv ring, in turn) captured
 * once with {@link CudaGraph#capture} around {@code begin(stream)} and replayed with
 * {@code Communicator.launch}, checked element by element against the same step run eagerly on
 * buffers of its own, and the first reduce-scatter against the Java reference.
 */
final class GraphScenarios {
    private static final int N = Scenarios.N;
    private static final int REPLAYS = 3;

    private GraphScenarios() {}

    static void capturedSteps(RankContext c) {
        for (int k : new int[] {1, 8, 32}) {
            capturedStep(c, k);
        }
    }

    /**
     * Rank 0 captures its step before a barrier, the others after it: the launch-queue pace must not
     * count captured transactions (with a lead of 1 rank 0 would wait in its second transaction for
     * ranks that wait for it in the barrier). Then every rank replays its graph, against the eager step.
     * The step runs eagerly once before, so that the ranks are connected (see there).
     */
    static void capturesOfRanksAtDifferentTimes(RankContext c) {
        int k = 8;
        CudaStream stream = c.newStream();
        DeviceTensor[] captured = buffers(c, k + 1, "graph.staggered");
        DeviceTensor[] eager = buffers(c, k + 1, "graph.staggered");
        // The same step once eagerly on every rank first: real NCCL connects a communicator's ranks
        // inside the enqueue of its first collectives, also in a capture, and rank 0 would then
        // wait there for peers that wait for it in the barrier.
        step(c, stream, buffers(c, k + 1, "graph.staggered.warmup"));
        stream.synchronize();
        if (c.rank != 0) {
            c.comm.barrier();
        }
        CudaGraph graph = CudaGraph.capture(stream, () -> step(c, stream, captured));
        if (c.rank == 0) {
            c.comm.barrier();
        }
        try (graph) {
            replayAndCompare(c, graph, stream, captured, eager, "graph.staggered.input", "staggered captures");
        }
    }

    /** The copy-engine transport refuses a capture, clearly; the communicator goes on working eagerly. */
    static void copyEngineRefusesCaptures(RankContext c) {
        CudaStream stream = c.newStream();
        DeviceTensor[] buffers = buffers(c, 2, "graph.refused");
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> CudaGraph.capture(stream, () -> step(c, stream, buffers)));
        assertTrue(e.getMessage().contains("copy-engine transport")
                && e.getMessage().contains("withMemcpyAllGather(false).withMemcpySendRecv(false)"), e.getMessage());
        assertFalse(stream.isCapturing(), c.what("the capture was not ended"));
        int[] input = Data.int32(c.seed(c.rank, "graph.refused.eager"), N);
        c.write(buffers[0], input);
        step(c, stream, buffers);
        stream.synchronize();
        checkFirstReduceScatter(c, "graph.refused.eager", buffers);
        assertFalse(c.comm.isAborted(), c.what("aborted: " + c.comm.abortReason()));
    }

    private static void capturedStep(RankContext c, int k) {
        CudaStream stream = c.newStream();
        DeviceTensor[] captured = buffers(c, k + 1, "graph." + k);
        DeviceTensor[] eager = buffers(c, k + 1, "graph." + k);
        try (CudaGraph graph = CudaGraph.capture(stream, () -> step(c, stream, captured))) {
            for (int replay = 0; replay < REPLAYS; replay++) {
                String tag = "graph." + k + ".input." + replay;
                replayAndCompare(c, graph, stream, captured, eager, tag, "K " + k + ", replay " + replay);
                checkFirstReduceScatter(c, tag, captured);
            }
        }
        assertFalse(c.comm.isAborted(), c.what("aborted: " + c.comm.abortReason()));
    }

    /**
     * New input {@code tag} in both first buffers, one replay of {@code graph} and the same step run
     * eagerly, then every buffer of the replay against the eager one.
     */
    private static void replayAndCompare(RankContext c, CudaGraph graph, CudaStream stream, DeviceTensor[] captured,
                                         DeviceTensor[] eager, String tag, String what) {
        int[] input = Data.int32(c.seed(c.rank, tag), N);
        c.write(captured[0], input);
        c.write(eager[0], input);
        c.comm.launch(graph, stream);
        step(c, stream, eager);
        stream.synchronize();
        for (int j = 0; j < captured.length; j++) {
            Verify.ints(c.what(what + ", buffer " + j + " against the eager step"), c.ints(eager[j]),
                    c.ints(captured[j]));
        }
    }

    /** Buffers with the same random contents on every call with the same tag (the untouched parts compare too). */
    private static DeviceTensor[] buffers(RankContext c, int count, String tag) {
        DeviceTensor[] buffers = new DeviceTensor[count];
        for (int j = 0; j < count; j++) {
            buffers[j] = c.upload(Data.int32(c.seed(c.rank, tag + ".buffer." + j), N));
        }
        return buffers;
    }

    /**
     * K transactions chained through K + 1 buffers, each begun on {@code stream} (capturing or not),
     * the comms stream joined back by waitOnComms.
     */
    private static void step(RankContext c, CudaStream stream, DeviceTensor[] buffers) {
        int n = c.world;
        for (int j = 0; j + 1 < buffers.length; j++) {
            DeviceTensor src = buffers[j];
            DeviceTensor dst = buffers[j + 1];
            Transaction transaction = c.comm.begin(stream);
            switch (j % 3) {
                case 0 -> transaction.reduceScatter(src, dst.shard(c.rank, n), ReduceOp.SUM);
                case 1 -> transaction.allGather(src.shard(c.rank, n), dst);
                default -> transaction.send(src, (c.rank + 1) % n).recv(dst, (c.rank + n - 1) % n);
            }
            transaction.execute(null);
        }
        c.comm.waitOnComms(stream);
    }

    private static void checkFirstReduceScatter(RankContext c, String tag, DeviceTensor[] buffers) {
        int shard = N / c.world;
        List<int[]> inputs = c.int32All(tag, N);
        Verify.ints(c.what("the first reduce-scatter of " + tag + " against the reference"),
                Data.reduceInt(inputs, ReduceOp.SUM, c.rank * shard, shard), c.ints(buffers[1].shard(c.rank, c.world)));
    }
}
