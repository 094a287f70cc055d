package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * MPI mode survives a SIGKILLed process (np 3, host emulation, {@link MpiLostRank}): with
 * {@code MpiOptions.withContinueWithoutFailedRanks(2)} under Open MPI's {@code mpirun
 * --enable-recovery}, the survivors' pending all-reduce ends in {@code RankLostException} naming the
 * killed rank, {@code recover()} gives them a communicator of their own (renumbered), on which
 * their all-reduces are checked element by element, and both communicators close; the job exits 0
 * and leaves no process. The middle rank (renumbering) and the last rank are killed in turn, each
 * while the survivors' all-reduce is pending on it; and a job of 4 loses two processes one after
 * the other (the survivors' communicator survives a loss too). {@code -Djnccl.it.mpi.backend=cuda} runs it on
 * real NCCL (every process on GPU 0, its own {@code NCCL_HOSTID}). MPICH
 * is skipped with the reason: its hydra ends or breaks the job at a death whatever its flags (see
 * docs/elastic-mpi.md).
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class MpiLostRankTest {
    private static final int WORLD = 3;
    /**
     * {@code host} (the default: the emulation, one device per process) or {@code cuda}: real NCCL, every
     * process on GPU 0 with its own {@code NCCL_HOSTID} over the socket transport (scripts/gpu/gpu-mpi-test.sh).
     */
    private static final String BACKEND = System.getProperty("jnccl.it.mpi.backend", "host");
    private static final boolean REAL_NCCL = !BACKEND.equals("host");

    @ParameterizedTest(name = "{0}, rank {1} killed")
    @CsvSource({"OPEN_MPI, 1", "OPEN_MPI, 2", "MPICH, 1"})
    void survivorsRecoverAndFinishWithCheckedSums(MpiJobs.Launcher launcher, int victim) throws Exception {
        assumeTrue(launcher == MpiJobs.Launcher.OPEN_MPI, "MPICH's hydra (4.0) ends or breaks the job when a process"
                + " dies, also with -disable-auto-cleanup, and its MPIR_CVAR_ENABLE_FT fails an assertion in MPI_Test:"
                + " survivors cannot go on (docs/elastic-mpi.md)");
        runAndCheck(launcher, WORLD, List.of(Integer.toString(victim)));
    }

    /** World 4 loses rank 1, then rank 3 (rank 2 of the survivors): the two left recover twice. */
    @org.junit.jupiter.api.Test
    void survivorsRecoverFromTwoLossesInTurn() throws Exception {
        runAndCheck(MpiJobs.Launcher.OPEN_MPI, 4, List.of("1", "3"));
    }

    /**
     * Rank 2 dies while the others wait for it in a host-side barrier: no NCCL error here; the
     * barrier's deadline (the watchdog timeout) aborts them, the probe finds rank 2 gone.
     */
    @org.junit.jupiter.api.Test
    void survivorsOfALossInAHostSideBarrierRecover() throws Exception {
        runAndCheck(MpiJobs.Launcher.OPEN_MPI, WORLD, List.of("b2"));
    }

    /**
     * Rank 2 dies between steps: no collective of the survivors is in flight when it dies; their next
     * all-reduce, posted once its process has ended, must end in RankLostException as mid-step.
     */
    @org.junit.jupiter.api.Test
    void survivorsOfARankKilledBetweenStepsRecover() throws Exception {
        runAndCheck(MpiJobs.Launcher.OPEN_MPI, WORLD, List.of("k2"));
    }

    /** {@code victims}: see {@link MpiLostRank}. */
    private static void runAndCheck(MpiJobs.Launcher launcher, int world, List<String> victims) throws Exception {
        if (!REAL_NCCL) {
            Packs.assumeDevices(world);
        }
        MpiJobs jobs = new MpiJobs(launcher, BACKEND, REAL_NCCL, REAL_NCCL
                ? Map.of("NCCL_SOCKET_IFNAME", "lo", "NCCL_NVLS_ENABLE", "0") : Map.of()).survivorsRunOn();
        String spec = String.join(",", victims);
        Path gate = Files.createTempDirectory("jnccl-lost-gate-").resolve("gate");
        try (MpiJobs.Job job = jobs.start(MpiLostRank.class, spec, world, "-Djnccl.it.lostGate=" + gate)) {
            List<Integer> members = new java.util.ArrayList<>();
            for (int r = 0; r < world; r++) {
                members.add(r);
            }
            for (String token : victims) {
                int victim = Integer.parseInt(token.replaceAll("[bk]", ""));
                Matcher running = job.awaitLine("RUNNING rank=" + victim + " pid=(\\d+)", MpiWorldsChecks.JOB_TIMEOUT);
                kill(Long.parseLong(running.group(1)));
                // With the survivors' FIRST lines: the time from the kill to the first collective of the
                // recovered communicator (docs/elastic.md reports it from the GPU machine).
                System.out.println("KILLED rank=" + victim + " at=" + System.currentTimeMillis());
                if (token.startsWith("k")) {
                    Files.createFile(Path.of(gate + "." + victim)); // the process has ended: the survivors go on
                }
                for (int rank : members) {
                    if (rank != victim) {
                        job.awaitLine("LOST rank=" + rank + " lost=\\[" + members.indexOf(victim) + "\\] of "
                                + members.size(), MpiWorldsChecks.JOB_TIMEOUT);
                    }
                }
                members.remove(Integer.valueOf(victim));
            }
            int exit = job.awaitExit(Duration.ofSeconds(120));
            String output = job.output();
            assertFalse(output.contains("FAILED rank="), output);
            assertFalse(output.contains("MPI_Abort"), output);
            for (int rank : members) {
                assertTrue(output.contains("RECOVERED rank=" + rank + " new=" + members.indexOf(rank) + " world="
                        + members.size() + " PASS"), "rank " + rank + "\n" + output);
                assertTrue(output.contains("DONE rank=" + rank), "rank " + rank + "\n" + output);
            }
            assertEquals(0, exit, "mpirun's exit code (Open MPI with --enable-recovery exits 0 after a death)\n"
                    + output);
            job.assertNoRankLeft(Duration.ofSeconds(15));
            output.lines().filter(l -> l.startsWith("LOST rank=") || l.startsWith("FIRST rank=")
                    || l.startsWith("POSTED rank=")).forEach(System.out::println);
        }
    }

    /** SIGKILLs process {@code pid} and waits (bounded) until it has ended. */
    private static void kill(long pid) throws Exception {
        java.util.Optional<ProcessHandle> process = ProcessHandle.of(pid);
        if (process.isPresent()) {
            process.get().destroyForcibly();
            process.get().onExit().get(30, TimeUnit.SECONDS);
        }
    }
}
