package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.lang.reflect.Field;
import java.time.Duration;
import java.util.Arrays;
import org.junit.jupiter.api.Test;

/**
 * The watchdog's poll allocates nothing while its communicator is busy: a thread that allocates per
 * poll makes garbage at any rate of transactions (hundreds of KB per second at a 1 ms interval),
 * which the caller pays in collections. Measured with the watchdog thread's allocation counter
 * ({@code com.sun.management.ThreadMXBean}), never with a clock, over windows of polls while the test
 * thread executes transactions (so that every poll probes completion and finds probes pending):
 * the median over the windows must be below one byte per poll, so an object every few dozen polls
 * fails, while a stray allocation of the runtime in a few windows does not. The median, not the
 * fewest: at its default interval the watchdog runs interpreted or C1-compiled code for tens of
 * minutes before C2 compiles its poll, so an allocation that only escape analysis removes (such
 * as {@code Thread.sleep}'s JFR event object) is garbage in practice and must fail here, before C2.
 */
class WatchdogAllocationTest {
    private static final Duration INTERVAL = Duration.ofMillis(1);
    private static final int WARM_UP_POLLS = 500;
    private static final int WINDOWS = 9;
    private static final int POLLS_PER_WINDOW = 100;
    private static final int BATCH = 64;
    private static final double BOUND_BYTES_PER_POLL = 1;

    @Test
    void aPollAllocatesNothingWhileTransactionsRun() throws Exception {
        Object savedLevel = HotPathAllocationTest.setJncclLogLevel("INFO");
        CommunicatorOptions options = CommunicatorOptions.defaults().withWatchdogInterval(INTERVAL);
        try (Communicator comm = Communicator.single(0, options);
             CudaStream compute = CudaStream.create();
             CudaEvent ready = CudaEvent.create();
             CudaEvent signal = CudaEvent.create();
             DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 1024)) {
            memory.fill((byte) 3, compute);
            compute.record(ready);
            compute.synchronize();
            Busy busy = new Busy(comm, ready, signal, memory.tensor(DType.FP32));
            Watchdog watchdog = watchdogOf(comm);
            AllocationCounter counter = AllocationCounter.create();
            busy.untilPolls(watchdog, WARM_UP_POLLS);
            measure(busy, watchdog, counter);
        } finally {
            HotPathAllocationTest.setJncclLogLevel(savedLevel);
        }
    }

    private static void measure(Busy busy, Watchdog watchdog, AllocationCounter counter) {
        long id = watchdog.threadId();
        double[] perPoll = new double[WINDOWS];
        for (int w = 0; w < WINDOWS; w++) {
            long polls = watchdog.polls();
            long bytes = counter.threadAllocatedBytes(id);
            busy.untilPolls(watchdog, POLLS_PER_WINDOW);
            perPoll[w] = (double) (counter.threadAllocatedBytes(id) - bytes) / (watchdog.polls() - polls);
        }
        double[] sorted = perPoll.clone();
        Arrays.sort(sorted);
        double median = sorted[WINDOWS / 2];
        assertTrue(median < BOUND_BYTES_PER_POLL, "bytes the watchdog thread allocated per poll in " + WINDOWS
                + " windows of " + POLLS_PER_WINDOW + " polls: " + Arrays.toString(perPoll) + "; median " + median
                + ", expected fewer than " + BOUND_BYTES_PER_POLL + " (nothing)");
    }

    private static Watchdog watchdogOf(Communicator comm) throws ReflectiveOperationException {
        Field field = Communicator.class.getDeclaredField("watchdog");
        field.setAccessible(true);
        return (Watchdog) field.get(comm);
    }

    /** Executes transactions (a synchronize every batch bounds the queue) until the watchdog made {@code n} more polls. */
    private record Busy(Communicator comm, CudaEvent ready, CudaEvent signal, DeviceTensor tensor) {
        void untilPolls(Watchdog watchdog, int n) {
            DeviceTensor shard = tensor.shard(comm.rank(), comm.worldSize());
            long until = watchdog.polls() + n;
            while (watchdog.polls() < until) {
                for (int i = 0; i < BATCH; i++) {
                    comm.begin(ready).reduceScatter(tensor).allGather(shard, tensor).execute(signal);
                }
                comm.synchronize();
            }
        }
    }
}
