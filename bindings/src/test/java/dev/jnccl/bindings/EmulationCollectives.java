package dev.jnccl.bindings;

import static dev.jnccl.bindings.EmulationSupport.cuda;
import static dev.jnccl.bindings.EmulationSupport.nccl;

import dev.jnccl.bindings.EmulationSupport.DType;
import dev.jnccl.bindings.EmulationSupport.Op;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.testsupport.LowPrecision;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * One collective call, described once for all ranks ({@link Case}), with its inputs and the
 * expected outputs of every rank computed in Java ({@link #prepare}), and the per-rank execution
 * through the raw bindings with an element-by-element comparison ({@link #execute}). Works on any
 * backend: device memory is only touched through cudaMemcpy.
 */
final class EmulationCollectives {
    private EmulationCollectives() {}

    enum Coll { ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, REDUCE, ALL_TO_ALL, SEND_RECV }

    /** How the inputs are drawn: ordinary random values, or extremes / NaN for low-precision edge cases. */
    enum Data { RANDOM, EXTREMES }

    /**
     * @param count  elements per rank as NCCL counts them (recvcount of reduce-scatter, sendcount of
     *               all-gather, per-peer count of all-to-all)
     * @param root   root of broadcast / reduce (ignored elsewhere)
     */
    record Case(Coll coll, DType type, Op op, long count, boolean inPlace, int root, long seed, Data data) {
        Case(Coll coll, DType type, Op op, long count, boolean inPlace, int root, long seed) {
            this(coll, type, op, count, inPlace, root, seed, Data.RANDOM);
        }

        @Override
        public String toString() {
            return coll + "/" + type + (op == null ? "" : "/" + op) + " count=" + count
                    + (inPlace ? " in-place" : " out-of-place")
                    + (coll == Coll.BROADCAST || coll == Coll.REDUCE ? " root=" + root : "")
                    + (data == Data.RANDOM ? "" : " data=" + data) + " seed=" + seed;
        }
    }

    /** Every case of the matrix for world n: every collective, type and op, in place and out of place. */
    static List<Case> matrix(int n, List<DType> types, long seed) {
        List<Case> cases = new ArrayList<>();
        Random random = new Random(seed);
        long[] counts = {1001, 1, 333, 77};
        int index = 0;
        for (DType type : types) {
            for (Coll coll : Coll.values()) {
                boolean reduction = coll == Coll.ALL_REDUCE || coll == Coll.REDUCE_SCATTER || coll == Coll.REDUCE;
                for (Op op : reduction ? Op.values() : new Op[] {null}) {
                    for (boolean inPlace : coll == Coll.SEND_RECV ? new boolean[] {false} : new boolean[] {false, true}) {
                        long count = counts[index % counts.length];
                        int root = index % n;
                        cases.add(new Case(coll, type, op, count, inPlace, root, random.nextLong()));
                        index++;
                    }
                }
            }
        }
        return cases;
    }

    /** Inputs, initial receive buffers and expected results of every rank. */
    static final class Prepared {
        final Case c;
        final int n;
        /** Out of place: the send buffer's content; in place: null. */
        final MemorySegment[] send;
        /** The receive buffer's initial content (in place: the one buffer, input included). */
        final MemorySegment[] recvInit;
        /** The receive buffer's expected content after the call. */
        final MemorySegment[] expected;
        /** Element offsets of the send / recv pointers inside the one buffer (in place only). */
        final long[] sendOffset;
        final long[] recvOffset;
        /** Elements of the receive buffer that are compared, [from, to). */
        final long[] checkFrom;
        final long[] checkTo;

        Prepared(Case c, int n) {
            this.c = c;
            this.n = n;
            send = new MemorySegment[n];
            recvInit = new MemorySegment[n];
            expected = new MemorySegment[n];
            sendOffset = new long[n];
            recvOffset = new long[n];
            checkFrom = new long[n];
            checkTo = new long[n];
        }
    }

    static long sendElements(Case c, int n) {
        return switch (c.coll) {
            case REDUCE_SCATTER, ALL_TO_ALL -> n * c.count;
            default -> c.count;
        };
    }

    static long recvElements(Case c, int n) {
        return switch (c.coll) {
            case ALL_GATHER, ALL_TO_ALL -> n * c.count;
            default -> c.count;
        };
    }

    /** Draws the inputs and computes what every rank must hold afterwards. Memory comes from arena. */
    static Prepared prepare(Case c, int n, Arena arena) {
        DType t = c.type;
        long sendElems = sendElements(c, n);
        long recvElems = recvElements(c, n);
        Random random = new Random(c.seed);
        MemorySegment[] input = new MemorySegment[n];
        for (int r = 0; r < n; r++) {
            input[r] = arena.allocate(sendElems * t.size, 16);
            fill(c, input[r], sendElems, random);
        }
        Prepared p = new Prepared(c, n);
        // The reduced vector (all-reduce, reduce: count; reduce-scatter: n * count).
        MemorySegment reduced = null;
        if (c.op != null) {
            reduced = arena.allocate(sendElems * t.size, 16);
            reduceInto(c, input, reduced, sendElems);
        }
        for (int r = 0; r < n; r++) {
            long bufferElems = c.inPlace ? Math.max(sendElems, recvElems) : recvElems;
            MemorySegment init = arena.allocate(bufferElems * t.size, 16);
            byte[] garbage = new byte[(int) init.byteSize()];
            random.nextBytes(garbage);
            MemorySegment.copy(MemorySegment.ofArray(garbage), 0, init, 0, garbage.length);
            MemorySegment expected = arena.allocate(init.byteSize(), 16);
            long from = 0;
            long to = bufferElems;
            if (c.inPlace) {
                // NCCL's in-place layouts: the send pointer lies inside the receive buffer.
                switch (c.coll) {
                    case REDUCE_SCATTER -> p.recvOffset[r] = r * c.count;
                    case ALL_GATHER -> p.sendOffset[r] = r * c.count;
                    default -> { }
                }
                boolean receivesOnly = c.coll == Coll.BROADCAST && r != c.root;
                if (!receivesOnly) {
                    MemorySegment.copy(input[r], 0, init, p.sendOffset[r] * t.size, sendElems * t.size);
                }
            } else {
                p.send[r] = input[r];
            }
            MemorySegment.copy(init, 0, expected, 0, init.byteSize());
            long at = p.recvOffset[r] * t.size;
            switch (c.coll) {
                case ALL_REDUCE -> MemorySegment.copy(reduced, 0, expected, at, c.count * t.size);
                case REDUCE_SCATTER -> {
                    MemorySegment.copy(reduced, r * c.count * t.size, expected, at, c.count * t.size);
                    if (c.inPlace) {
                        // Only the rank's own chunk is defined after an in-place reduce-scatter.
                        from = r * c.count;
                        to = from + c.count;
                    }
                }
                case ALL_GATHER -> {
                    for (int q = 0; q < n; q++) {
                        MemorySegment.copy(input[q], 0, expected, q * c.count * t.size, c.count * t.size);
                    }
                }
                case BROADCAST -> MemorySegment.copy(input[c.root], 0, expected, 0, c.count * t.size);
                case REDUCE -> {
                    if (r == c.root) {
                        MemorySegment.copy(reduced, 0, expected, 0, c.count * t.size);
                    } // other ranks: the receive buffer is not touched
                }
                case ALL_TO_ALL -> {
                    for (int q = 0; q < n; q++) {
                        MemorySegment.copy(input[q], r * c.count * t.size, expected, q * c.count * t.size,
                                c.count * t.size);
                    }
                }
                case SEND_RECV -> MemorySegment.copy(input[(r - 1 + n) % n], 0, expected, 0, c.count * t.size);
            }
            p.recvInit[r] = init;
            p.expected[r] = expected;
            p.checkFrom[r] = from;
            p.checkTo[r] = to;
        }
        return p;
    }

    // The hot loops live in small methods of their own so that the JIT compiles them whole.
    private static void fill(Case c, MemorySegment segment, long count, Random random) {
        DType t = c.type;
        for (long i = 0; i < count; i++) {
            t.set(segment, i, draw(c, t, random));
        }
    }

    private static void reduceInto(Case c, MemorySegment[] input, MemorySegment reduced, long count) {
        DType t = c.type;
        int n = input.length;
        long[] values = new long[n];
        long ringChunk = ringChunk(c.count, n, t.size);
        for (long i = 0; i < count; i++) {
            for (int r = 0; r < n; r++) {
                values[r] = t.get(input[r], i);
            }
            // Where NCCL's ring starts for this element (see reduce.c in the emulation).
            long first = switch (c.coll) {
                case REDUCE_SCATTER -> i / c.count + 1; // rank r's chunk: from r + 1 to r
                case REDUCE -> c.root + 1;
                default -> i / ringChunk + 1;           // all-reduce: ring chunk k from k + 1 to k
            };
            t.set(reduced, i, EmulationSupport.reduce(t, c.op, values, n, (int) (first % n)));
        }
    }

    /** NCCL's one-channel ring all-reduce chunk: ceil(count / n) elements, rounded up to 16 bytes. */
    private static long ringChunk(long count, int n, int elementSize) {
        long granule = Math.max(1, 16 / elementSize);
        long chunk = (count + n - 1) / n;
        return Math.max(1, (chunk + granule - 1) / granule * granule);
    }

    private static long draw(Case c, DType t, Random random) {
        if (c.data == Data.EXTREMES && t.isFloat()) {
            int pick = random.nextInt(16);
            float big = switch (t) {
                case FP8E4M3 -> LowPrecision.E4M3_MAX;
                case FP8E5M2 -> LowPrecision.E5M2_MAX;
                case FLOAT16 -> 65504f;
                case BFLOAT16 -> Float.intBitsToFloat(0x7F7F0000);
                default -> Float.MAX_VALUE;
            };
            if (pick == 0 && t.kind != EmulationSupport.Kind.F64) {
                return t.fromFloat(Float.NaN);
            }
            if (pick < 8 && t.kind != EmulationSupport.Kind.F64) {
                return t.fromFloat(random.nextBoolean() ? big : -big);
            }
        }
        return t.random(random);
    }

    /**
     * Runs the case on one rank (its comm and stream), waits for the stream and returns the
     * mismatches found (empty when the result is right). API errors throw.
     */
    static List<String> execute(Prepared p, int rank, MemorySegment comm, MemorySegment stream) {
        Case c = p.c;
        DType t = c.type;
        int n = p.n;
        long size = t.size;
        MemorySegment recv = EmulationSupport.deviceMalloc(p.recvInit[rank].byteSize());
        MemorySegment send = c.inPlace ? null : EmulationSupport.deviceMalloc(p.send[rank].byteSize());
        try {
            EmulationSupport.toDevice(recv, p.recvInit[rank]);
            if (send != null) {
                EmulationSupport.toDevice(send, p.send[rank]);
            }
            // Device pointers are zero-length segments: offsets are address arithmetic.
            MemorySegment sendPtr = c.inPlace ? MemorySegment.ofAddress(recv.address() + p.sendOffset[rank] * size) : send;
            MemorySegment recvPtr = MemorySegment.ofAddress(recv.address() + p.recvOffset[rank] * size);
            String what = "rank " + rank + " " + c;
            switch (c.coll) {
                case ALL_REDUCE -> nccl(Nccl.ncclAllReduce(sendPtr, recvPtr, c.count, t.id, c.op.id, comm, stream), what);
                case REDUCE_SCATTER -> nccl(Nccl.ncclReduceScatter(sendPtr, recvPtr, c.count, t.id, c.op.id, comm, stream), what);
                case ALL_GATHER -> nccl(Nccl.ncclAllGather(sendPtr, recvPtr, c.count, t.id, comm, stream), what);
                case BROADCAST -> nccl(Nccl.ncclBroadcast(sendPtr, recvPtr, c.count, t.id, c.root, comm, stream), what);
                case REDUCE -> nccl(Nccl.ncclReduce(sendPtr, recvPtr, c.count, t.id, c.op.id, c.root, comm, stream), what);
                case ALL_TO_ALL -> nccl(Nccl.ncclAlltoAll(sendPtr, recvPtr, c.count, t.id, comm, stream), what);
                case SEND_RECV -> {
                    nccl(Nccl.ncclGroupStart(), "ncclGroupStart");
                    nccl(Nccl.ncclSend(sendPtr, c.count, t.id, (rank + 1) % n, comm, stream), what + " send");
                    nccl(Nccl.ncclRecv(recvPtr, c.count, t.id, (rank - 1 + n) % n, comm, stream), what + " recv");
                    nccl(Nccl.ncclGroupEnd(), "ncclGroupEnd");
                }
            }
            cuda(CudaRuntime.cudaStreamSynchronize(stream), "cudaStreamSynchronize after " + what);
            int async = EmulationSupport.asyncError(comm);
            if (async != 0) {
                throw new AssertionError(what + ": ncclCommGetAsyncError = " + EmulationSupport.ncclText(async) + ": "
                        + EmulationSupport.lastError(comm));
            }
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment actual = arena.allocate(p.recvInit[rank].byteSize(), 16);
                EmulationSupport.toHost(actual, recv);
                return compare(what, t, p.expected[rank], actual, p.checkFrom[rank], p.checkTo[rank]);
            }
        } finally {
            EmulationSupport.free(recv);
            if (send != null) {
                EmulationSupport.free(send);
            }
        }
    }

    static List<String> compare(String what, DType t, MemorySegment expected, MemorySegment actual, long from, long to) {
        List<String> problems = new ArrayList<>();
        long bad = 0;
        for (long i = from; i < to; i++) {
            long e = t.get(expected, i);
            long a = t.get(actual, i);
            if (!t.same(e, a)) {
                if (bad < 4) {
                    problems.add(what + ": element " + i + " expected " + t.show(e) + " but was " + t.show(a));
                }
                bad++;
            }
        }
        if (bad > 4) {
            problems.add(what + ": ... " + bad + " wrong elements of " + (to - from));
        }
        return problems;
    }
}
