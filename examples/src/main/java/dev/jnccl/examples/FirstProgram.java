package dev.jnccl.examples;

import dev.jnccl.Backend;
import dev.jnccl.DType;
import dev.jnccl.JncclRuntime;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.Random;

/**
 * A first jnccl program: every rank fills a host array with its own numbers, copies it to its
 * device, sums it over all ranks with an all-reduce, copies the result back and checks every
 * element; rank 0 prints the verdict. One thread per GPU (all visible GPUs; 2 ranks on the host
 * emulation when there is none). Run: {@code java --enable-native-access=ALL-UNNAMED -cp ...
 * dev.jnccl.examples.FirstProgram}.
 */
public final class FirstProgram {
    static final int COUNT = 1 << 16;

    private FirstProgram() {}

    /**
     * Runs the program.
     *
     * @param args ignored
     */
    public static void main(String[] args) {
        int gpus = JncclRuntime.query().backend() == Backend.HOST ? 2 : 0;
        System.exit(run(gpus) == 0 ? 0 : 1);
    }

    /** Runs on {@code gpus} ranks (0: all visible GPUs); returns the number of wrong elements over all ranks. */
    static long run(int gpus) {
        long[] wrongOverRanks = new long[1];
        ThreadsCommunicators.run(gpus, ThreadsOptions.defaults(), comm -> {
            int rank = comm.rank();
            int world = comm.worldSize();
            try (Arena arena = Arena.ofConfined();
                 DeviceMemory memory = DeviceMemory.allocate(DType.FP32, COUNT)) {
                // 1. This rank's input on the host: whole numbers, so the sum is exact in any order.
                MemorySegment host = arena.allocate(ValueLayout.JAVA_FLOAT, COUNT);
                float[] input = inputOf(rank);
                MemorySegment.copy(input, 0, host, ValueLayout.JAVA_FLOAT, 0, COUNT);
                // 2. Host -> device (synchronous), 3. the all-reduce on the comms stream, 4. device -> host.
                memory.copyFromHost(host);
                comm.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM, comm.stream());
                comm.synchronize(); // waits for the comms stream (and notices an abort)
                memory.copyToHost(host);
                // 5. Check every element against the sum computed here from every rank's input.
                float[] expected = new float[COUNT];
                for (int r = 0; r < world; r++) {
                    float[] other = inputOf(r);
                    for (int i = 0; i < COUNT; i++) {
                        expected[i] += other[i];
                    }
                }
                long wrong = 0;
                for (int i = 0; i < COUNT; i++) {
                    wrong += host.getAtIndex(ValueLayout.JAVA_FLOAT, i) == expected[i] ? 0 : 1;
                }
                // 6. A host gather: every rank's count of wrong elements, on every rank.
                long[] wrongPerRank = comm.allGatherLongsHost(wrong);
                if (rank == 0) {
                    wrongOverRanks[0] = Arrays.stream(wrongPerRank).sum();
                    System.out.println(wrongOverRanks[0] == 0
                            ? "OK: all-reduce of " + COUNT + " floats over " + world + " ranks, every element checked"
                            : "WRONG: elements per rank " + Arrays.toString(wrongPerRank));
                }
            }
        });
        return wrongOverRanks[0];
    }

    /** Rank {@code rank}'s input: whole numbers from 1 to 1000, the same on every call. */
    static float[] inputOf(int rank) {
        Random random = new Random(31L * rank + 7);
        float[] values = new float[COUNT];
        for (int i = 0; i < COUNT; i++) {
            values[i] = 1 + random.nextInt(1000);
        }
        return values;
    }
}
