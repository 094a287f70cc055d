package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;

/**
 * The MPI-mode checks for one launcher and backend ({@link MpiJobs}): every operation at a world
 * size, the device override, MPI's error string, MPI initialised by the application, a rank that
 * throws mid-transaction and a SIGKILLed rank.
 */
abstract class MpiWorldsChecks {
    /** A job of the ops scenario: JVM starts, init and the whole scenario list, on 2 busy cores. */
    static final Duration JOB_TIMEOUT = Duration.ofSeconds(240);

    abstract MpiJobs jobs(MpiJobs.Launcher launcher);

    void everyOperation(MpiJobs.Launcher launcher, int world) throws Exception {
        jobs(launcher).runAndPass("ops", world, JOB_TIMEOUT);
    }

    void errorString(MpiJobs.Launcher launcher) throws Exception {
        jobs(launcher).runAndPass("error-string", 2, JOB_TIMEOUT);
    }

    void hostInitialisedMpi(MpiJobs.Launcher launcher) throws Exception {
        jobs(launcher).runAndPass("host-init", 2, JOB_TIMEOUT);
    }

    /** Rank 1 of 3 throws mid-transaction: the job exits non-zero within 30 s of it, no rank process left. */
    void throwingRank(MpiJobs.Launcher launcher) throws Exception {
        try (MpiJobs.Job job = jobs(launcher).start("throw", 3)) {
            job.awaitLine("(?m)^STARTED$", JOB_TIMEOUT);
            int exit = job.awaitExit(Duration.ofSeconds(30));
            String output = job.output();
            assertNotEquals(0, exit, job.name + ": exit code\n" + output);
            assertTrue(output.contains("rank 1 fails on purpose mid-transaction"), output);
            assertTrue(output.contains("ending the MPI job (MPI_Abort"), output);
            assertTrue(!output.contains("UNEXPECTED"), output);
            job.assertNoRankLeft(Duration.ofSeconds(15));
        }
    }

    /**
     * As {@link #throwingRank} with {@code create()} and the user's try-with-resources: the victim's
     * close tells the others how far it got, their watchdog sees them waiting for it, and the job
     * ends within 10 s of the start of the failing transaction (before: the close timeout, 35 s).
     */
    void throwingRankWithCreate(MpiJobs.Launcher launcher) throws Exception {
        try (MpiJobs.Job job = jobs(launcher).start("throw-create", 3)) {
            String output = awaitFailureWithin(job, "(?m)^STARTED$", 10);
            assertTrue(output.contains("rank 1 closed its communicator after"), output);
            assertTrue(output.contains("ending the MPI job (MPI_Abort"), output);
            assertTrue(!output.contains("UNEXPECTED"), output);
            job.assertNoRankLeft(Duration.ofSeconds(15));
        }
    }

    /** Rank 0 of 3 reaches close 20 s after the others: every rank closes cleanly, exit code 0. */
    void lateCloser(MpiJobs.Launcher launcher) throws Exception {
        String output = jobs(launcher).runAndPass("late-close", 3, JOB_TIMEOUT.plusMillis(MpiRank.LATE_CLOSE_MILLIS));
        for (int r = 0; r < 3; r++) {
            assertTrue(output.contains("CLOSED rank=" + r), "rank " + r + " did not close\n" + output);
        }
    }

    /** Rank 2 of 3 is SIGKILLed mid-run: the job ends within the watchdog timeout (3 s) plus 30 s, no rank left. */
    void killedRank(MpiJobs.Launcher launcher) throws Exception {
        try (MpiJobs.Job job = jobs(launcher).start("killed", 3)) {
            Matcher running = job.awaitLine("RUNNING rank=2 pid=(\\d+)", JOB_TIMEOUT);
            long pid = Long.parseLong(running.group(1));
            ProcessHandle.of(pid).ifPresent(ProcessHandle::destroyForcibly); // SIGKILL
            int exit = job.awaitExit(Duration.ofSeconds(3 + 30));
            assertNotEquals(0, exit, job.name + ": exit code\n" + job.output());
            assertTrue(!job.output().contains("UNEXPECTED"), job.output());
            job.assertNoRankLeft(Duration.ofSeconds(15));
        }
    }

    /**
     * Rank 2 of 3 never comes to the second barrier ({@code rendezvous} "barrier") or all-gather
     * ("allGatherBytesHost"): the others' wait ends at the deadline (3 s) with a message naming
     * exactly rank 2 and the rendezvous, and the job ends within a few seconds of it.
     */
    void absentRank(MpiJobs.Launcher launcher, String scenario, String rendezvous) throws Exception {
        try (MpiJobs.Job job = jobs(launcher).start(scenario, 3)) {
            String output = awaitFailureWithin(job, "(?m)^WAITING rank=[01]$",
                    TimeUnit.MILLISECONDS.toSeconds(MpiRank.ABSENT_DEADLINE_MILLIS) + 10);
            // #2: the first barrier of all was #1 (every host-side rendezvous of a communicator counts).
            Matcher named = java.util.regex.Pattern.compile(java.util.regex.Pattern.quote(rendezvous) + " #2 on rank [01]:"
                    + " rank 2 did not arrive within " + MpiRank.ABSENT_DEADLINE_MILLIS + " ms").matcher(output);
            assertTrue(named.find(), job.name + ": no rank named rank 2\n" + output);
            assertNamesOnly("rank 2", output, job.name);
            assertTrue(output.contains("ending the MPI job (MPI_Abort"), output);
            assertTrue(!output.contains("UNEXPECTED"), output);
            job.assertNoRankLeft(Duration.ofSeconds(15));
        }
    }

    /**
     * Rank 2 of 3 calls create long after the others: their create ends at the init timeout with a
     * message naming exactly rank 2, and the job ends.
     */
    void lateCreator(MpiJobs.Launcher launcher) throws Exception {
        try (MpiJobs.Job job = jobs(launcher).start("late-create", 3)) {
            String output = awaitFailureWithin(job, "(?m)^CREATING rank=[01]$",
                    TimeUnit.MILLISECONDS.toSeconds(MpiRank.LATE_CREATE_INIT_TIMEOUT_MILLIS) + 15);
            Matcher named = java.util.regex.Pattern.compile("create on rank [01]: rank 2 did not arrive within "
                    + MpiRank.LATE_CREATE_INIT_TIMEOUT_MILLIS + " ms").matcher(output);
            assertTrue(named.find(), job.name + ": no rank named rank 2\n" + output);
            assertNamesOnly("rank 2", output, job.name);
            assertTrue(output.contains("creating the communicator failed; ending the MPI job (MPI_Abort"), output);
            assertTrue(!output.contains("UNEXPECTED"), output);
            job.assertNoRankLeft(Duration.ofSeconds(15));
        }
    }

    /**
     * Waits for a line matching {@code startLine}, then for the job to end with a non-zero exit code
     * within {@code maxSeconds} of it; returns the job's output.
     */
    static String awaitFailureWithin(MpiJobs.Job job, String startLine, long maxSeconds)
            throws InterruptedException {
        job.awaitLine(startLine, JOB_TIMEOUT);
        long started = System.nanoTime();
        int exit = job.awaitExit(Duration.ofSeconds(maxSeconds + 20));
        long seconds = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - started);
        String output = job.output();
        assertNotEquals(0, exit, job.name + ": exit code\n" + output);
        assertTrue(seconds < maxSeconds, job.name + ": the job took " + seconds + " s to end\n" + output);
        return output;
    }

    /** Every "... did not arrive" in {@code output} names {@code absent} alone. */
    private static void assertNamesOnly(String absent, String output, String job) {
        Matcher m = java.util.regex.Pattern.compile(": (ranks? [^:]*?) did not arrive").matcher(output);
        while (m.find()) {
            assertTrue(m.group(1).equals(absent), job + ": named " + m.group(1) + ", not " + absent + "\n" + output);
        }
    }
}
