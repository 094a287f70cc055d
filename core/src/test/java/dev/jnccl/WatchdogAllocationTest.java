package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.lang.reflect.Field;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/**
 * The watchdog's poll allocates nothing while its communicator is busy: a thread that allocates per
 * poll makes garbage at any rate of transactions (hundreds of KB per second at a 1 ms interval),
 * which the caller pays in collections. Measured with the watchdog thread's allocation counter
 * ({@code com.sun.management.ThreadMXBean}), never with a clock, over windows of polls while the test
 * thread executes transactions (so that every poll probes completion and finds probes pending):
 * the fewest bytes per poll over the windows must be below one byte, so an object every few dozen
 * polls fails, while a stray allocation of the runtime in one window does not.
 */
class WatchdogAllocationTest {
    private static final Duration INTERVAL = Duration.ofMillis(1);
    private static final int WARM_UP_POLLS = 500;
    private static final int WINDOWS = 6;
    private static final int POLLS_PER_WINDOW = 100;
    /** How long windows go on while none is clean yet (a loaded machine may compile late). */
    private static final long MEASURE_NANOS = 20_000_000_000L;
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
        double fewest = Double.MAX_VALUE;
        StringBuilder windows = new StringBuilder();
        long start = System.nanoTime();
        int w = 0;
        while (w < WINDOWS || (fewest >= BOUND_BYTES_PER_POLL && System.nanoTime() - start < MEASURE_NANOS)) {
            w++;
            long polls = watchdog.polls();
            long bytes = counter.threadAllocatedBytes(id);
            busy.untilPolls(watchdog, POLLS_PER_WINDOW);
            double perPoll = (double) (counter.threadAllocatedBytes(id) - bytes) / (watchdog.polls() - polls);
            if (w <= 2 * WINDOWS) {
                windows.append(String.format(" %.2f", perPoll));
            }
            fewest = Math.min(fewest, perPoll);
        }
        assertTrue(fewest < BOUND_BYTES_PER_POLL, "bytes the watchdog thread allocated per poll in windows of "
                + POLLS_PER_WINDOW + " polls (" + w + " windows; the first " + Math.min(w, 2 * WINDOWS) + "):"
                + windows + "; fewest " + String.format("%.2f", fewest) + "; expected fewer than "
                + BOUND_BYTES_PER_POLL + " (nothing) in at least one window");
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
