package dev.jnccl.examples.bench;

import static java.lang.foreign.ValueLayout.JAVA_INT;

import dev.jnccl.Communicator;
import dev.jnccl.bindings.NcclFeature;
import dev.jnccl.bindings.NativeLibraries;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.reflect.Method;

/**
 * The raw twin of jnccl's operations in {@link PairedHostCost}: exactly the native calls jnccl makes
 * for them (the transaction's and the convenience operations' sequences of {@code ExecutePipeline},
 * {@code CommandRunner} and {@code Waits}), made through the generated bindings on the <em>same</em>
 * NCCL communicator, comms stream and buffers as the jnccl side, with events of its own, and nothing
 * else: no checks, lock, flight recorder, pace or watchdog. What C would call, from Java; the
 * FFM downcalls cost what C's calls cost (see docs/performance.md).
 *
 * <ul>
 *   <li>transaction ({@code ExecutePipeline.execute}): cudaStreamWaitEvent(comms, ready) (the comms
 *       stream waits for the transaction's ready event), ncclGroupStart, ncclReduceScatter,
 *       ncclAllGather (both in place: {@code CommandRunner} groups a transaction's collectives),
 *       ncclGroupEnd, cudaEventRecord(signal, comms) (the signal given to {@code execute});</li>
 *   <li>a convenience operation on a caller stream ({@code Communicator.executeOrdered}):
 *       cudaEventRecord(ready, caller) (the transaction's ready event, recorded on the caller's
 *       stream), cudaStreamWaitEvent(comms, ready) (the pipeline's wait), ncclGroupStart, the one
 *       NCCL call, ncclGroupEnd (every command runs in a group, even alone), then {@code waitOnComms}:
 *       cudaEventRecord(done, comms), cudaStreamWaitEvent(caller, done).</li>
 * </ul>
 * The NCCL call's arguments are jnccl's too ({@code CommandRunner.direct}): in place, the counts per
 * rank where NCCL's are, and the reduction operator {@code CommandRunner.ncclOp} issues (a mean on
 * one rank is ncclSum, see {@link #reduceMean}).
 * On a non-blocking communicator a group end that answers ncclInProgress is awaited by polling
 * ncclCommGetAsyncError, as jnccl does (jnccl backs off by parking; here it spins).
 */
final class RawTwin {
    private final int success = Nccl.ncclSuccess();
    private final int inProgress = Nccl.ncclInProgress();
    private final int fp32 = Nccl.ncclFloat32();
    private final MemorySegment comm;
    private final MemorySegment comms;
    private final MemorySegment caller;
    private final MemorySegment ready;
    private final MemorySegment signal;
    private final MemorySegment opReady;
    private final MemorySegment opDone;
    private final MemorySegment asyncError;
    private final int rank;
    private final int world;
    private final long count;
    private final long shardCount;
    private final MemorySegment buffer;
    private final MemorySegment shard;
    private final MemorySegment other;
    private final boolean allToAll = NativeLibraries.load().supports(NcclFeature.ALL_TO_ALL);

    /**
     * The twin of {@code jnccl} (its work communicator and comms stream), on {@code buffer} (FP32, count
     * elements, in place) and {@code other} (the all-to-all's receive side, same size).
     */
    RawTwin(Communicator jnccl, CudaStream caller, CudaEvent ready, CudaEvent signal, CudaEvent opReady,
            CudaEvent opDone, long buffer, long other, long count, Arena arena) {
        this.comm = workHandle(jnccl);
        this.comms = jnccl.stream().handle();
        this.caller = caller.handle();
        this.ready = ready.handle();
        this.signal = signal.handle();
        this.opReady = opReady.handle();
        this.opDone = opDone.handle();
        this.asyncError = arena.allocate(JAVA_INT);
        this.rank = jnccl.rank();
        this.world = jnccl.worldSize();
        this.count = count;
        this.shardCount = count / world;
        this.buffer = MemorySegment.ofAddress(buffer);
        this.shard = MemorySegment.ofAddress(buffer + rank * shardCount * Float.BYTES);
        this.other = MemorySegment.ofAddress(other);
    }

    /**
     * The NCCL communicator jnccl's transactions run on (the blocking child of {@code BLOCKING_SPLIT},
     * the communicator itself in {@code NON_BLOCKING}). jnccl keeps it to itself; a benchmark that
     * must drive the same communicator reads it reflectively (the benchmark jar runs on the class path).
     */
    static MemorySegment workHandle(Communicator jnccl) {
        try {
            Method ncclComm = Communicator.class.getDeclaredMethod("ncclComm");
            ncclComm.setAccessible(true);
            Object nccl = ncclComm.invoke(jnccl);
            Method work = nccl.getClass().getDeclaredMethod("workHandle");
            work.setAccessible(true);
            return (MemorySegment) work.invoke(nccl);
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new IllegalStateException("PairedHostCost: cannot reach jnccl's NCCL communicator (run the"
                    + " benchmark jar on the class path, java -cp): " + e, e);
        }
    }

    /** {@return whether the loaded NCCL has ncclAlltoAll (else jnccl sends and receives, and there is no one-call twin)} */
    boolean hasAllToAll() {
        return allToAll;
    }

    /** The transaction: ready wait, reduce-scatter + all-gather in one group, signal. */
    void transaction() {
        cuda(CudaRuntime.cudaStreamWaitEvent(comms, ready, 0), "cudaStreamWaitEvent");
        nccl(Nccl.ncclGroupStart(), "ncclGroupStart");
        nccl(Nccl.ncclReduceScatter(buffer, shard, shardCount, fp32, Nccl.ncclSum(), comm, comms), "ncclReduceScatter");
        nccl(Nccl.ncclAllGather(shard, buffer, shardCount, fp32, comm, comms), "ncclAllGather");
        groupEnd();
        cuda(CudaRuntime.cudaEventRecord(signal, comms), "cudaEventRecord");
    }

    void allReduce(int op) {
        before();
        nccl(Nccl.ncclAllReduce(buffer, buffer, count, fp32, op, comm, comms), "ncclAllReduce");
        after();
    }

    /**
     * reduceMean: ncclAvg, except on one rank, where jnccl issues ncclSum (the mean of one rank is
     * its value bit for bit, and NCCL refuses ncclAvg on FP8 for a single rank). NCCL's ncclAvg on
     * one rank costs more (a scaled copy: 6.9 against 2.1 us per call at world 1 on the H200), so the
     * twin makes jnccl's call, not the one the name suggests.
     */
    void reduceMean() {
        allReduce(world == 1 ? Nccl.ncclSum() : Nccl.ncclAvg());
    }

    /** All-reduce (sum) of the first element only, as reduceNormSquared. */
    void allReduceOne() {
        before();
        nccl(Nccl.ncclAllReduce(buffer, buffer, 1, fp32, Nccl.ncclSum(), comm, comms), "ncclAllReduce");
        after();
    }

    void reduceScatter() {
        before();
        nccl(Nccl.ncclReduceScatter(buffer, shard, shardCount, fp32, Nccl.ncclSum(), comm, comms), "ncclReduceScatter");
        after();
    }

    void allGather() {
        before();
        nccl(Nccl.ncclAllGather(shard, buffer, shardCount, fp32, comm, comms), "ncclAllGather");
        after();
    }

    void broadcast() {
        before();
        nccl(Nccl.ncclBroadcast(buffer, buffer, count, fp32, 0, comm, comms), "ncclBroadcast");
        after();
    }

    void allToAll() {
        before();
        nccl(Nccl.ncclAlltoAll(buffer, other, shardCount, fp32, comm, comms), "ncclAlltoAll");
        after();
    }

    /** A convenience operation's start: the comms stream waits for the caller's work, then the group opens. */
    private void before() {
        cuda(CudaRuntime.cudaEventRecord(opReady, caller), "cudaEventRecord");
        cuda(CudaRuntime.cudaStreamWaitEvent(comms, opReady, 0), "cudaStreamWaitEvent");
        nccl(Nccl.ncclGroupStart(), "ncclGroupStart");
    }

    /** A convenience operation's end: the group closes, then the caller's stream waits for the comms stream. */
    private void after() {
        groupEnd();
        cuda(CudaRuntime.cudaEventRecord(opDone, comms), "cudaEventRecord");
        cuda(CudaRuntime.cudaStreamWaitEvent(caller, opDone, 0), "cudaStreamWaitEvent");
    }

    private void groupEnd() {
        int result = Nccl.ncclGroupEnd();
        if (result == inProgress) {
            awaitComm(comm, asyncError, "ncclGroupEnd");
        } else {
            nccl(result, "ncclGroupEnd");
        }
    }

    /**
     * Busy-polls ncclCommGetAsyncError into {@code slot} until {@code comm}'s last call has finished
     * (a non-blocking communicator's ncclInProgress), as C does.
     */
    static void awaitComm(MemorySegment comm, MemorySegment slot, String function) {
        int success = Nccl.ncclSuccess();
        int inProgress = Nccl.ncclInProgress();
        while (true) {
            int result = Nccl.ncclCommGetAsyncError(comm, slot);
            if (result != success) {
                throw new IllegalStateException("ncclCommGetAsyncError failed: NCCL error " + result);
            }
            int state = slot.get(JAVA_INT, 0);
            if (state == success) {
                return;
            }
            if (state != inProgress) {
                throw new IllegalStateException(function + " failed asynchronously: NCCL error " + state);
            }
            Thread.onSpinWait();
        }
    }

    /** Synchronizes the comms stream, then the caller's: the queue bound, the same for both sides. */
    void synchronize() {
        cuda(CudaRuntime.cudaStreamSynchronize(comms), "cudaStreamSynchronize");
        cuda(CudaRuntime.cudaStreamSynchronize(caller), "cudaStreamSynchronize");
    }

    /** Inside a group a non-blocking communicator may answer ncclInProgress: the group end settles it. */
    private void nccl(int result, String function) {
        if (result != success && result != inProgress) {
            throw new IllegalStateException(function + " failed: NCCL error " + result + " (rank " + rank + " of "
                    + world + ")");
        }
    }

    private static void cuda(int result, String function) {
        if (result != 0) {
            throw new IllegalStateException(function + " failed: CUDA error " + result);
        }
    }
}
