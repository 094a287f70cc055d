package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.DType;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.Registration;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.DeviceMemory;
import java.util.List;

/**
 * Scenarios of one rank for pre-multiplied sums ({@link ReduceOp#scaledSum}) and NCCL's buffers
 * (ncclMemAlloc memory, registration), run by every rank of a threads pack or an MPI job:
 * all-reduce and reduce-scatter with a scaled sum of each type family (FP32, BF16, INT32) against
 * NCCL's ring arithmetic in Java ({@link Data}; bit for bit on the emulation), and the same
 * collectives on memory from {@link DeviceMemory#allocateForNccl} registered with the communicator.
 */
final class BufferScenarios {
    private static final int N = Scenarios.N;

    private BufferScenarios() {}

    static void scaledSums(RankContext c) {
        int n = c.world;
        int shard = N / n;
        int from = c.rank * shard;
        ReduceOp third = ReduceOp.scaledSum(0.3);
        ReduceOp minusThree = ReduceOp.scaledSum(-3);
        List<float[]> f32 = c.fp32All("scaled.f32", N);
        List<float[]> f32rs = c.fp32All("scaled.f32rs", N);
        List<short[]> b16 = c.bf16All("scaled.bf16", N);
        List<short[]> b16rs = c.bf16All("scaled.bf16rs", N);
        List<int[]> i32 = c.int32All("scaled.i32", N);
        List<int[]> i32rs = c.int32All("scaled.i32rs", N);
        DeviceTensor tf = c.upload(f32.get(c.rank));
        DeviceTensor tfrs = c.upload(f32rs.get(c.rank));
        DeviceTensor tb = c.upload(b16.get(c.rank));
        DeviceTensor tbrs = c.upload(b16rs.get(c.rank));
        DeviceTensor ti = c.upload(i32.get(c.rank));
        DeviceTensor tirs = c.upload(i32rs.get(c.rank));
        CudaEvent ready = c.event();
        CudaEvent signal = c.event();
        c.compute().record(ready);
        try (Transaction tx = c.comm.begin(ready)) {
            tx.allReduce(tf, third).reduceScatter(tfrs, third).allReduce(tb, third).reduceScatter(tbrs, third)
                    .allReduce(ti, minusThree).reduceScatter(tirs, minusThree);
            tx.execute(signal);
        }
        c.comm.await(signal);
        Data.Ring scatterRing = Data.Ring.reduceScatter(c.rank, n);
        Verify.floats(c.what("allReduce FP32 " + third), Data.reduce(f32, third, 0, N, Data.Ring.allReduce(N, n, 4)),
                c.floats(tf), c.exact, Data.magnitude(f32, 0, N));
        Verify.floats(c.what("reduceScatter FP32 " + third), Data.reduce(f32rs, third, from, shard, scatterRing),
                c.floats(tfrs.shard(c.rank, n)), c.exact, Data.magnitude(f32rs, from, shard));
        Verify.bf16(c.what("allReduce BF16 " + third), Data.reduceBf16(b16, third, 0, N, Data.Ring.allReduce(N, n, 2)),
                c.bf16(tb), c.exact, Data.magnitudeBf16(b16, 0, N));
        Verify.bf16(c.what("reduceScatter BF16 " + third), Data.reduceBf16(b16rs, third, from, shard, scatterRing),
                c.bf16(tbrs.shard(c.rank, n)), c.exact, Data.magnitudeBf16(b16rs, from, shard));
        Verify.ints(c.what("allReduce INT32 " + minusThree), Data.reduceInt(i32, minusThree, 0, N), c.ints(ti));
        Verify.ints(c.what("reduceScatter INT32 " + minusThree), Data.reduceInt(i32rs, minusThree, from, shard),
                c.ints(tirs.shard(c.rank, n)));
        // The out-of-place and rooted commands take the same operator (one conversion for every reducing command).
        List<int[]> oop = c.int32All("scaled.oop", N);
        DeviceTensor src = c.upload(oop.get(c.rank));
        DeviceTensor dst = c.upload(Data.int32(c.seed(c.rank, "scaled.oop.dst"), N));
        int root = n - 1;
        DeviceTensor rooted = c.rank == root ? c.upload(Data.int32(c.seed(c.rank, "scaled.reduce.dst"), N)) : null;
        CudaEvent rootedSignal = c.event();
        try (Transaction tx = c.comm.begin(c.compute())) {
            tx.allReduce(src, dst, minusThree).reduce(src, rooted, minusThree, root);
            tx.execute(rootedSignal);
        }
        c.comm.await(rootedSignal);
        int[] expected = Data.reduceInt(oop, minusThree, 0, N);
        Verify.ints(c.what("allReduce INT32 out of place " + minusThree), expected, c.ints(dst));
        Verify.ints(c.what("out-of-place source unchanged"), oop.get(c.rank), c.ints(src));
        if (rooted != null) {
            Verify.ints(c.what("reduce INT32 " + minusThree + " to rank " + root), expected, c.ints(rooted));
        }
        // The convenience call takes a scaled sum too (the communicator's operator is made once).
        List<float[]> again = c.fp32All("scaled.again", N);
        DeviceTensor ta = c.upload(again.get(c.rank));
        c.comm.allReduce(ta, third, c.compute());
        c.compute().synchronize();
        Verify.floats(c.what("Communicator.allReduce FP32 " + third),
                Data.reduce(again, third, 0, N, Data.Ring.allReduce(N, n, 4)), c.floats(ta), c.exact,
                Data.magnitude(again, 0, N));
    }

    static void registeredNcclMemory(RankContext c) {
        int n = c.world;
        int shard = N / n;
        int from = c.rank * shard;
        List<float[]> sums = c.fp32All("registered.f32", N);
        List<int[]> scaled = c.int32All("registered.i32", N);
        DeviceMemory floats = DeviceMemory.allocateForNccl((long) N * DType.FP32.size());
        DeviceMemory ints = DeviceMemory.allocateForNccl((long) N * DType.INT32.size());
        try (Registration rf = c.comm.register(floats); Registration ri = c.comm.register(ints)) {
            DeviceTensor tf = floats.tensor(DType.FP32);
            DeviceTensor ti = ints.tensor(DType.INT32);
            c.write(tf, sums.get(c.rank));
            c.write(ti, scaled.get(c.rank));
            CudaEvent ready = c.event();
            CudaEvent signal = c.event();
            c.compute().record(ready);
            ReduceOp seven = ReduceOp.scaledSum(7);
            try (Transaction tx = c.comm.begin(ready)) {
                tx.allReduce(tf, ReduceOp.SUM).reduceScatter(ti, seven);
                tx.execute(signal);
            }
            c.comm.await(signal);
            Verify.floats(c.what("allReduce FP32 SUM on registered ncclMemAlloc memory"),
                    Data.reduce(sums, ReduceOp.SUM, 0, N, Data.Ring.allReduce(N, n, 4)), c.floats(tf), c.exact,
                    Data.magnitude(sums, 0, N));
            Verify.ints(c.what("reduceScatter INT32 " + seven + " on registered ncclMemAlloc memory"),
                    Data.reduceInt(scaled, seven, from, shard), c.ints(ti.shard(c.rank, n)));
            assertThrows(IllegalStateException.class, floats::close, "memory registered with " + rf);
            assertTrue(!ri.isClosed());
        }
        floats.close();
        ints.close();
    }
}
