package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.EnumSource;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * MPI mode on the host emulation under real Open MPI and MPICH: jobs of 1, 2, 3 and 4 processes
 * run every transaction command, convenience operation and data type, in place and out of place,
 * the host gathers and barrier ({@link MpiRank} {@code ops}: {@link Scenarios} checked element by
 * element on random data, one verdict per rank); then the device override, MPI's error string, MPI
 * initialised by the application, a throwing rank (also one whose ncclCommAbort hangs), a SIGKILLed
 * rank, ranks absent from a host-side rendezvous or from create (named at the deadline) and an
 * interrupted rendezvous. Skipped, with the reason, where a launcher is not installed.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class MpiWorldsTest extends MpiWorldsChecks {

    @Override
    MpiJobs jobs(MpiJobs.Launcher launcher) {
        return new MpiJobs(launcher, "host", false, Map.of());
    }

    static Stream<Arguments> worlds() {
        List<Arguments> cases = new ArrayList<>();
        for (MpiJobs.Launcher launcher : MpiJobs.Launcher.values()) {
            for (int world = 1; world <= 4; world++) {
                cases.add(Arguments.of(launcher, world));
            }
        }
        return cases.stream();
    }

    @ParameterizedTest(name = "{0}, world {1}")
    @MethodSource("worlds")
    void everyOperationChecked(MpiJobs.Launcher launcher, int world) throws Exception {
        everyOperation(launcher, world);
    }

    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void deviceOverrideOnEveryRank(MpiJobs.Launcher launcher) throws Exception {
        // Both processes on device 0 of one machine: NCCL refuses that ("Duplicate GPU detected") unless
        // NCCL_MULTI_RANK_GPU_ENABLE=1 (2.30+) or each process is its own node, and so does the emulation.
        // (The shared-devices run sets the variable for every process: there the refusal cannot be seen.)
        if ("1".equals(System.getenv("NCCL_MULTI_RANK_GPU_ENABLE"))) {
            jobs(launcher).runAndPass("device-override", 2, JOB_TIMEOUT);
            return;
        }
        try (MpiJobs.Job job = jobs(launcher).start("device-override", 2)) {
            int exit = job.awaitExit(JOB_TIMEOUT);
            String output = job.output();
            assertNotEquals(0, exit, job.name + ": exit code\n" + output);
            // The rank that arrives second names the other first: either order is the same refusal.
            assertTrue(output.contains("Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 0")
                    || output.contains("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 0"), output);
            job.assertNoRankLeft(Duration.ofSeconds(15));
        }
        new MpiJobs(launcher, "host", false, Map.of("NCCL_MULTI_RANK_GPU_ENABLE", "1"))
                .runAndPass("device-override", 2, JOB_TIMEOUT);
    }

    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void mpiErrorCarriesMpisText(MpiJobs.Launcher launcher) throws Exception {
        errorString(launcher);
    }

    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void mpiInitialisedByTheApplicationIsLeftAlone(MpiJobs.Launcher launcher) throws Exception {
        hostInitialisedMpi(launcher);
    }

    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void aThrowingRankEndsTheJob(MpiJobs.Launcher launcher) throws Exception {
        throwingRank(launcher);
    }

    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void aThrowingRankEndsTheJobWithCreateAndTryWithResources(MpiJobs.Launcher launcher) throws Exception {
        throwingRankWithCreate(launcher);
    }

    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void aRankThatClosesLateStillClosesCleanly(MpiJobs.Launcher launcher) throws Exception {
        lateCloser(launcher);
    }

    /**
     * As {@link #aThrowingRankEndsTheJobWithCreateAndTryWithResources} with rank 0 held inside its
     * enqueue of the failing transaction (host emulation: its first NCCL operation hangs in ncclGroupEnd), as real
     * NCCL holds a rank in ncclGroupEnd while it connects to a peer that never comes: its watchdog
     * still hears of the victim's close and the job ends within seconds, not at the close timeout.
     */
    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void aThrowingRankEndsTheJobWhileAPeerIsHeldInsideAnEnqueue(MpiJobs.Launcher launcher) throws Exception {
        MpiJobs jobs = new MpiJobs(launcher, "host", false, Map.of("JNCCL_HOST_FAULT", "hang-enqueue",
                "JNCCL_HOST_FAULT_RANK", "0", "JNCCL_HOST_FAULT_AT", "1"));
        try (MpiJobs.Job job = jobs.start("throw-create", 2)) {
            String output = awaitFailureWithin(job, "(?m)^STARTED$", 10);
            assertTrue(output.contains("rank 1 closed its communicator after 0 transaction(s) while this rank executed 1"),
                    output);
            assertTrue(output.contains("ending the MPI job (MPI_Abort"), output);
            assertTrue(!output.contains("UNEXPECTED"), output);
            job.assertNoRankLeft(Duration.ofSeconds(15));
        }
    }

    /**
     * The only rank of a job throws mid-transaction and its ncclCommAbort never returns (host
     * emulation: {@code JNCCL_HOST_FAULT=hang-abort}): the abort is abandoned at the close timeout
     * (5 s) and MPI_Abort, which the rank calls after its abort, still ends the job; the reason it
     * logs names the abandonment. One rank: no peer can end the job for it.
     */
    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void aRankWhoseAbortHangsStillEndsTheJob(MpiJobs.Launcher launcher) throws Exception {
        MpiJobs jobs = new MpiJobs(launcher, "host", false, Map.of("JNCCL_HOST_FAULT", "hang-abort",
                "JNCCL_HOST_FAULT_RANK", "0"));
        try (MpiJobs.Job job = jobs.start("throw-hang-abort", 1)) {
            job.awaitLine("(?m)^STARTED$", JOB_TIMEOUT);
            // The abort's bound plus a margin; without the bound the job never ends.
            int exit = job.awaitExit(MpiRank.HANG_ABORT_CLOSE.plusSeconds(25));
            String output = job.output();
            assertNotEquals(0, exit, job.name + ": exit code\n" + output);
            assertTrue(output.contains("rank 0 fails on purpose mid-transaction"), output);
            assertTrue(output.contains("ncclCommAbort of rank 0 hangs for ever"), output);
            assertTrue(output.contains("ncclCommAbort did not return within " + MpiRank.HANG_ABORT_CLOSE.toMillis()
                    + " ms: the communicator was abandoned"), output);
            assertTrue(output.contains("ending the MPI job (MPI_Abort"), output);
            assertTrue(!output.contains("UNEXPECTED"), output);
            job.assertNoRankLeft(Duration.ofSeconds(15));
        }
    }

    /**
     * Rank 1 of 3 hangs in its 3rd NCCL operation (host emulation fault injection): the watchdog (3 s)
     * diagnoses and aborts, and MPI_Abort called from a thread of jnccl's (hence MPI_THREAD_MULTIPLE)
     * ends the job.
     */
    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void aWatchdogAbortEndsTheJob(MpiJobs.Launcher launcher) throws Exception {
        MpiJobs jobs = new MpiJobs(launcher, "host", false, Map.of("JNCCL_HOST_FAULT", "hang",
                "JNCCL_HOST_FAULT_RANK", "1", "JNCCL_HOST_FAULT_AT", "3"));
        try (MpiJobs.Job job = jobs.start("watchdog", 3)) {
            int exit = job.awaitExit(JOB_TIMEOUT);
            String output = job.output();
            assertNotEquals(0, exit, job.name + ": exit code\n" + output);
            // The diagnosis, from every rank's summary gathered over MPI, leads the reason: the hang is on
            // rank 1's stream, so every rank is inside the same transaction.
            assertTrue(output.contains("[jnccl-watchdog-rank-") && java.util.regex.Pattern.compile("aborting"
                    + " communicator: every rank is inside transaction #\\d+ with the same commands: NCCL or the"
                    + " transport is stuck").matcher(output).find() && output.contains("every rank answered")
                    && output.contains("watchdog: transaction #"), output);
            assertTrue(output.contains("ending the MPI job (MPI_Abort"), output);
            assertTrue(!output.contains("UNEXPECTED"), output);
            job.assertNoRankLeft(Duration.ofSeconds(15));
        }
    }

    /**
     * UCX told to take the JVM's signals ({@code UCX_ERROR_SIGNALS}): create hands them back, and the
     * ranks survive many safepoints after it. MPICH links UCX, so there the hand-back must be logged;
     * Open MPI loads UCX only through its {@code pml/ucx} component (every rank's verdict still checks
     * the handlers).
     */
    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void theJvmKeepsItsSignalHandlersWhenUcxIsToldToTakeThem(MpiJobs.Launcher launcher) throws Exception {
        MpiJobs jobs = new MpiJobs(launcher, "host", false, Map.of("UCX_ERROR_SIGNALS", "SEGV,BUS,ILL,FPE"));
        String output = jobs.runAndPass("ucx-signals", 2, JOB_TIMEOUT);
        if (launcher == MpiJobs.Launcher.MPICH) {
            assertTrue(output.contains("MPI's UCX had replaced the JVM's signal handlers"), output);
        }
    }

    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void aKilledRankEndsTheJob(MpiJobs.Launcher launcher) throws Exception {
        killedRank(launcher);
    }

    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void aRankAbsentFromABarrierIsNamedAtTheDeadline(MpiJobs.Launcher launcher) throws Exception {
        absentRank(launcher, "absent-barrier", "barrier");
    }

    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void aRankAbsentFromAHostAllGatherIsNamedAtTheDeadline(MpiJobs.Launcher launcher) throws Exception {
        absentRank(launcher, "absent-allgather", "allGatherBytesHost");
    }

    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void aRankThatCreatesLateIsNamedAtTheInitDeadline(MpiJobs.Launcher launcher) throws Exception {
        lateCreator(launcher);
    }

    /**
     * A rendezvous interrupted on rank 0 while ranks 1 and 2 stay away names them, carries the
     * interrupt and keeps the interrupt status; its abandoned requests disturb nothing later.
     */
    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void anInterruptedRendezvousNamesTheAbsentRanks(MpiJobs.Launcher launcher) throws Exception {
        String output = jobs(launcher).runAndPass("interrupted-arrival", 3, JOB_TIMEOUT);
        assertTrue(output.contains("interrupted=barrier_#1_on_rank_0_was_interrupted_while_ranks_[1,_2]_had_not"
                + "_arrived"), output);
    }
}
