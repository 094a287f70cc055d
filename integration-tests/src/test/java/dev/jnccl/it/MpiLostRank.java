package dev.jnccl.it;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DeviceTensor;
import dev.jnccl.RankLostException;
import dev.jnccl.ReduceOp;
import dev.jnccl.mpi.MpiCommunicators;
import dev.jnccl.mpi.MpiOptions;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;

/**
 * One rank of an MPI job that loses a process and goes on without it (main class started by
 * {@link MpiLostRankTest} as {@code mpirun --enable-recovery -np 3 java ... MpiLostRank VICTIM SEED},
 * with {@link MpiOptions#withContinueWithoutFailedRanks(int)} 2). Every rank all-reduces SUM
 * (checked); then the victim prints {@code RUNNING pid=P} and sleeps until the test SIGKILLs it,
 * while the others all-reduce again, which must end in {@link RankLostException} naming the victim.
 * The survivors {@code recover()} (twice: the same communicator), check their new ranks (renumbered in
 * the order of their old ranks), all-reduce {@value #STEPS} times on the survivors' communicator,
 * each checked element by element against the sum over the survivors' data, and close both
 * communicators. Lines: {@code LOST rank=R lost=[..]}, {@code RECOVERED rank=R new=N world=W PASS},
 * {@code DONE rank=R}; any other end prints {@code FAILED rank=R <exception>} and exits 1.
 */
public final class MpiLostRank {
    static final int COUNT = 1024;
    static final int STEPS = 3;

    private MpiLostRank() {}

    public static void main(String[] args) throws Exception {
        int victim = Integer.parseInt(args[0]);
        long seed = Long.parseLong(args[1]);
        System.out.println("PID " + ProcessHandle.current().pid());
        System.out.flush();
        CommunicatorOptions options = CommunicatorOptions.defaults().withWatchdog(Duration.ofSeconds(8))
                .withWatchdogInterval(Duration.ofMillis(50)).withCloseTimeout(Duration.ofSeconds(20))
                .withInitTimeout(Duration.ofSeconds(60));
        Communicator comm = MpiCommunicators.create(MpiOptions.defaults().withCommunicator(options)
                .withContinueWithoutFailedRanks(2));
        int rank = comm.rank();
        try {
            run(comm, victim, seed);
            System.out.println("DONE rank=" + rank);
        } catch (Throwable e) {
            System.out.println("FAILED rank=" + rank + " " + String.valueOf(e).replace("\n", " | "));
            e.printStackTrace(System.out);
            System.out.flush();
            System.exit(1);
        }
    }

    private static void run(Communicator comm, int victim, long seed) throws Exception {
        int rank = comm.rank();
        List<Integer> all = List.of(0, 1, 2);
        try (RankContext c = new RankContext(comm, seed)) {
            sumAndCheck(c, comm, all, "before", rank);
        }
        if (rank == victim) {
            System.out.println("RUNNING pid=" + ProcessHandle.current().pid());
            System.out.flush();
            Thread.sleep(120_000); // SIGKILLed by the test
            throw new IllegalStateException("the victim was not killed");
        }
        RankLostException lost;
        try (RankContext c = new RankContext(comm, seed)) {
            sumAndCheck(c, comm, all, "pending", rank);
            throw new IllegalStateException("the all-reduce with rank " + victim + " gone completed");
        } catch (RankLostException e) {
            lost = e;
        }
        System.out.println("LOST rank=" + rank + " lost=" + lost.lostRanks());
        Communicator survivors = lost.recover();
        if (lost.recover() != survivors) {
            throw new IllegalStateException("a second recover() returned another communicator");
        }
        List<Integer> members = new ArrayList<>(all);
        members.remove(Integer.valueOf(victim));
        if (survivors.worldSize() != members.size() || survivors.rank() != members.indexOf(rank)) {
            throw new IllegalStateException("survivors' communicator: rank " + survivors.rank() + " of "
                    + survivors.worldSize() + ", expected " + members.indexOf(rank) + " of " + members.size());
        }
        try (RankContext c = new RankContext(survivors, seed)) {
            for (int step = 0; step < STEPS; step++) {
                sumAndCheck(c, survivors, members, "after" + step, rank);
            }
        }
        System.out.println("RECOVERED rank=" + rank + " new=" + survivors.rank() + " world=" + survivors.worldSize()
                + " PASS");
        System.out.flush();
        survivors.close();
        comm.close();
    }

    /**
     * All-reduce SUM of random data seeded by each member's old rank, checked element by element
     * (bit for bit on the emulation, within FP32's tolerance on real NCCL) against the sum in NCCL's
     * ring order over the members' data ({@code members}: old ranks, in the
     * order of the communicator's ranks).
     */
    private static void sumAndCheck(RankContext c, Communicator comm, List<Integer> members, String tag, int oldRank) {
        DeviceTensor tensor = c.upload(Data.fp32(c.seed(oldRank, tag), COUNT));
        comm.allReduce(tensor, ReduceOp.SUM, c.compute());
        comm.synchronize();
        List<float[]> inputs = new ArrayList<>();
        for (int member : members) {
            inputs.add(Data.fp32(c.seed(member, tag), COUNT));
        }
        float[] expected = Data.reduce(inputs, ReduceOp.SUM, 0, COUNT, Data.Ring.allReduce(COUNT, members.size(), 4));
        Verify.floats(c.what("all-reduce " + tag + " on rank " + comm.rank() + " of " + comm.worldSize()), expected,
                c.floats(tensor), c.exact, null);
    }
}
