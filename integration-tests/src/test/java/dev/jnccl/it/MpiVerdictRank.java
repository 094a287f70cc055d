package dev.jnccl.it;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.mpi.MpiCommunicators;
import dev.jnccl.mpi.MpiOptions;
import java.time.Duration;

/**
 * One rank of an MPI job whose second collective hangs because of rank {@value #CULPRIT} (main
 * class started by {@link MpiHangVerdictTest} as {@code mpirun -np 3 java ... MpiVerdictRank
 * SCENARIO SEED}). Every rank all-reduces MAX (transaction #1, checked to complete), then:
 * <ul>
 *   <li>{@code skip}: the culprit skips the all-reduce SUM of transaction #2 and idles in user code
 *       ({@link #idle}) until its communicator is aborted, then synchronizes;</li>
 *   <li>{@code lag}: the culprit idles the same way, then goes on to the all-reduce, too late;</li>
 *   <li>{@code early}: the culprit returns from its work (its communicator closes after 1 transaction);</li>
 *   <li>{@code killed}: the culprit prints {@code RUNNING pid=P} and idles until the test SIGKILLs it;</li>
 *   <li>{@code mismatch}: the culprit all-reduces {@value #COUNT} - 1 elements, the others {@value #COUNT};</li>
 *   <li>{@code stuck}: every rank all-reduces, and the host emulation hangs it on the culprit's
 *       stream ({@code JNCCL_HOST_FAULT=hang}, set by the test).</li>
 * </ul>
 * The others all-reduce SUM {@value #COUNT} FP32 elements of random data and synchronize, which must
 * throw. Each rank prints the message of the exception it gets as one line, {@code ABORTED rank=R
 * <message, lines joined by " | ">}; an early culprit prints {@code RETURNED rank=R} as it returns. Watchdog
 * {@value #WATCHDOG_MILLIS} ms, polled every 50 ms; the consistency check follows {@code JNCCL_DEBUG}.
 */
public final class MpiVerdictRank {
    static final int CULPRIT = 2;
    static final int COUNT = 4096;
    /** The watchdog's timeout: the exchange of summaries gets a quarter of it, ample on a loaded machine. */
    static final long WATCHDOG_MILLIS = 4_000;

    private MpiVerdictRank() {}

    public static void main(String[] args) {
        String scenario = args[0];
        long seed = Long.parseLong(args[1]);
        System.out.println("PID " + ProcessHandle.current().pid());
        System.out.flush();
        CommunicatorOptions options = CommunicatorOptions.defaults().withWatchdog(Duration.ofMillis(WATCHDOG_MILLIS))
                .withWatchdogInterval(Duration.ofMillis(50)).withCloseTimeout(Duration.ofSeconds(20));
        int[] rank = {-1};
        try {
            MpiCommunicators.run(MpiOptions.defaults().withCommunicator(options), comm -> {
                rank[0] = comm.rank();
                try (RankContext c = new RankContext(comm, seed)) {
                    run(scenario, comm, c);
                } catch (CommunicatorAbortedException e) {
                    report(comm.rank(), e);
                    throw e;
                }
            });
        } catch (CommunicatorAbortedException e) {
            report(rank[0], e); // the early culprit's close, or a failure outside the work
        }
        sleep(60_000); // MPI_Abort of a failing peer ends this process; the test's bound fails the job otherwise
        System.out.println("UNEXPECTED rank=" + rank[0] + ": the job did not end");
    }

    private static void run(String scenario, Communicator comm, RankContext c) {
        DeviceTensor first = c.upload(Data.fp32(c.seed(comm.rank(), "first"), COUNT));
        comm.allReduce(first, ReduceOp.MAX, c.compute());
        comm.synchronize();
        DeviceTensor second = c.upload(Data.fp32(c.seed(comm.rank(), "second"), COUNT));
        boolean culprit = comm.rank() == CULPRIT;
        switch (scenario) {
            case "skip", "lag", "killed" -> {
                if (culprit) {
                    if (scenario.equals("killed")) {
                        System.out.println("RUNNING pid=" + ProcessHandle.current().pid());
                        System.out.flush();
                    }
                    idle(comm);
                }
                if (!culprit || scenario.equals("lag")) {
                    comm.allReduce(second, ReduceOp.SUM, c.compute());
                }
            }
            case "early" -> {
                if (culprit) {
                    // Its close then waits, with its communicator aborted by the peers', for the job's end.
                    System.out.println("RETURNED rank=" + comm.rank());
                    System.out.flush();
                    return;
                }
                comm.allReduce(second, ReduceOp.SUM, c.compute());
            }
            case "stuck" -> comm.allReduce(second, ReduceOp.SUM, c.compute());
            case "mismatch" -> comm.allReduce(culprit ? c.upload(Data.fp32(c.seed(comm.rank(), "short"), COUNT - 1))
                    : second, ReduceOp.SUM, c.compute());
            default -> throw new IllegalArgumentException("unknown scenario " + scenario);
        }
        comm.synchronize();
        if (scenario.equals("mismatch")) {
            // Real NCCL checks no count across ranks: it may hang (the watchdog names both counts) or
            // run the mismatch to completion with wrong results, which only jnccl.debug=detail catches.
            System.out.println("COMPLETED rank=" + comm.rank() + ": transaction #2");
            System.out.flush();
            throw new IllegalStateException("NCCL ran the mismatched all-reduce to completion");
        }
        System.out.println("UNEXPECTED rank=" + comm.rank() + ": transaction #2 completed");
        System.out.flush();
    }

    /** The culprit's user code, outside jnccl: sleeps until its communicator is aborted (at most 30 s). */
    private static void idle(Communicator comm) {
        long end = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        try {
            while (!comm.isAborted() && System.nanoTime() < end) {
                Thread.sleep(10);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void report(int rank, CommunicatorAbortedException e) {
        System.out.println("ABORTED rank=" + rank + " " + e.getMessage().replace("\n", " | ")
                + (e.diagnosis().isPresent() ? " | diagnosis: " + e.diagnosis().get().verdict() : " | no diagnosis"));
        System.out.flush();
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
