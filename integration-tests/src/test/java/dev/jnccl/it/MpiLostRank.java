package dev.jnccl.it;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DeviceTensor;
import dev.jnccl.RankLostException;
import dev.jnccl.ReduceOp;
import dev.jnccl.mpi.MpiCommunicators;
import dev.jnccl.mpi.MpiOptions;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * One rank of an MPI job that loses processes and goes on without them (main class started by
 * {@link MpiLostRankTest} as {@code mpirun --enable-recovery -np W java ... MpiLostRank VICTIMS SEED},
 * VICTIMS the original ranks killed in turn, e.g. {@code 1,3}, each prefixed with {@code b} when the
 * survivors wait for it in a host-side barrier rather than an all-reduce, with {@code k} when it is
 * killed between steps (the survivors post their all-reduce only after its death, see
 * {@link #awaitGate}); with
 * {@link MpiOptions#withContinueWithoutFailedRanks(int)} 2). For each victim: every member
 * all-reduces SUM (checked); then the victim prints {@code RUNNING rank=R pid=P} and sleeps until the
 * test SIGKILLs it, while the others all-reduce again, which must end in {@link RankLostException}
 * naming the victim (in the current numbering). The survivors {@code recover()} (twice: the same
 * communicator) and check their new ranks (renumbered in the order of their old ranks). At the end
 * they all-reduce {@value #STEPS} times, each checked element by element against the sum over the
 * survivors' data, and close every communicator they had. Lines: {@code LOST rank=R lost=[..] of W},
 * {@code RECOVERED rank=R new=N world=W PASS}, {@code DONE rank=R} (R: the original rank); any
 * other end prints {@code FAILED rank=R <exception>} and exits 1.
 */
public final class MpiLostRank {
    static final int COUNT = 1024;
    static final int STEPS = 3;

    private MpiLostRank() {}

    public static void main(String[] args) throws Exception {
        List<String> victims = Arrays.asList(args[0].split(","));
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
            run(comm, victims, seed);
            System.out.println("DONE rank=" + rank);
        } catch (Throwable e) {
            System.out.println("FAILED rank=" + rank + " " + String.valueOf(e).replace("\n", " | "));
            e.printStackTrace(System.out);
            System.out.flush();
            System.exit(1);
        }
    }

    private static void run(Communicator comm, List<String> victims, long seed) throws Exception {
        int rank = comm.rank();
        List<Integer> members = new ArrayList<>();
        for (int r = 0; r < comm.worldSize(); r++) {
            members.add(r);
        }
        List<Communicator> opened = new ArrayList<>(List.of(comm));
        Communicator current = comm;
        for (String token : victims) {
            boolean inBarrier = token.startsWith("b");
            boolean betweenSteps = token.startsWith("k");
            int victim = Integer.parseInt(token.substring(inBarrier || betweenSteps ? 1 : 0));
            try (RankContext c = new RankContext(current, seed)) {
                sumAndCheck(c, current, members, "before" + victim, rank);
            }
            if (rank == victim) {
                System.out.println("RUNNING rank=" + rank + " pid=" + ProcessHandle.current().pid());
                System.out.flush();
                Thread.sleep(120_000); // SIGKILLed by the test
                throw new IllegalStateException("the victim was not killed");
            }
            if (betweenSteps) {
                awaitGate(victim, rank);
            }
            current = survive(current, members, victim, inBarrier, rank, seed);
            members.remove(Integer.valueOf(victim));
            opened.add(current);
        }
        try (RankContext c = new RankContext(current, seed)) {
            for (int step = 0; step < STEPS; step++) {
                sumAndCheck(c, current, members, "after" + step, rank);
            }
        }
        System.out.println("RECOVERED rank=" + rank + " new=" + current.rank() + " world=" + current.worldSize()
                + " PASS");
        System.out.flush();
        for (Communicator each : opened.reversed()) {
            each.close();
        }
    }

    /**
     * A victim killed between steps: the survivors post their next all-reduce only once the test has
     * seen the victim's process end (it creates the file {@code -Djnccl.it.lostGate} + "." + victim),
     * so nothing of theirs is in flight when it dies. Prints {@code POSTED rank=R at=T}: the time from
     * there to LOST is the detection of a death found by the next collective.
     */
    private static void awaitGate(int victim, int rank) throws InterruptedException {
        Path gate = Path.of(System.getProperty("jnccl.it.lostGate") + "." + victim);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (!Files.exists(gate)) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("the test did not open " + gate + " within 120 s");
            }
            Thread.sleep(20);
        }
        System.out.println("POSTED rank=" + rank + " at=" + System.currentTimeMillis());
    }

    /**
     * The all-reduce (or, {@code inBarrier}, the host-side barrier) pending on the victim (old rank
     * {@code victim}, gone) must end in RankLostException naming it; {@return the survivors'
     * communicator, checked}
     */
    private static Communicator survive(Communicator current, List<Integer> members, int victim, boolean inBarrier,
                                        int rank, long seed) {
        RankLostException lost;
        try (RankContext c = new RankContext(current, seed)) {
            if (inBarrier) {
                current.barrier();
            } else {
                sumAndCheck(c, current, members, "pending" + victim, rank);
            }
            throw new IllegalStateException("the " + (inBarrier ? "barrier" : "all-reduce") + " with rank " + victim
                    + " gone completed");
        } catch (RankLostException e) {
            lost = e;
        }
        long detected = System.currentTimeMillis();
        System.out.println("LOST rank=" + rank + " lost=" + lost.lostRanks() + " of " + current.worldSize() + " at="
                + detected);
        Communicator survivors = lost.recover();
        long recovered = System.currentTimeMillis();
        if (lost.recover() != survivors) {
            throw new IllegalStateException("a second recover() returned another communicator");
        }
        List<Integer> left = new ArrayList<>(members);
        left.remove(Integer.valueOf(victim));
        if (!lost.lostRanks().equals(List.of(members.indexOf(victim))) || survivors.worldSize() != left.size()
                || survivors.rank() != left.indexOf(rank)) {
            throw new IllegalStateException("lost " + lost.lostRanks() + ", survivors' communicator rank "
                    + survivors.rank() + " of " + survivors.worldSize() + "; expected lost [" + members.indexOf(victim)
                    + "], rank " + left.indexOf(rank) + " of " + left.size());
        }
        try (RankContext c = new RankContext(survivors, seed)) {
            sumAndCheck(c, survivors, left, "first" + victim, rank);
        }
        System.out.println("FIRST rank=" + rank + " at=" + System.currentTimeMillis() + " recover_ms="
                + (recovered - detected) + " first_collective_ms=" + (System.currentTimeMillis() - recovered));
        return survivors;
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
