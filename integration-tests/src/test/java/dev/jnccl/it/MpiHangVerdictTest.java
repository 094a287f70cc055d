package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Hang forensics in MPI mode on the host emulation, under Open MPI and MPICH, at world 3, with and
 * without the consistency check ({@code JNCCL_DEBUG=detail}): rank 2 skips the second collective,
 * lags in user code, returns early, is SIGKILLed, or every rank is stuck in it (the emulation's
 * {@code hang}); see {@link MpiVerdictRank}. The rank that diagnoses gathers every rank's summary
 * over MPI, and the verdict, naming rank 2 and what it did, leads the exception message of every
 * rank that gets one, the same on every rank; the job then ends (MPI_Abort) within seconds. Skipped,
 * with the reason, where a launcher is not installed.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class MpiHangVerdictTest {
    private static final int WORLD = 3;
    /** Where the culprit's thread is: in user code, at the line of {@code idle} that sleeps. */
    private static final String IN_IDLE = " (it is in user code: at MpiVerdictRank.idle(MpiVerdictRank.java:";
    /** From the start of the second collective: the watchdog, the exchange, the peers' aborts, the grace, a margin. */
    private static final long END_SECONDS = TimeUnit.MILLISECONDS.toSeconds(MpiVerdictRank.WATCHDOG_MILLIS) + 15;

    static Stream<Arguments> jobs() {
        List<Arguments> cases = new ArrayList<>();
        for (MpiJobs.Launcher launcher : MpiJobs.Launcher.values()) {
            cases.add(Arguments.of(launcher, false));
            cases.add(Arguments.of(launcher, true));
        }
        return cases.stream();
    }

    /**
     * {@code host} (the default: the emulation, one device per process) or {@code cuda}: real NCCL, every
     * process on GPU 0 with its own {@code NCCL_HOSTID} over the socket transport (scripts/gpu/gpu-mpi-test.sh).
     */
    private static final String BACKEND = System.getProperty("jnccl.it.mpi.backend", "host");
    private static final boolean REAL_NCCL = !BACKEND.equals("host");

    private static MpiJobs jobs(MpiJobs.Launcher launcher, boolean detail, String... fault) {
        Map<String, String> environment = new TreeMap<>();
        if (REAL_NCCL) {
            environment.put("NCCL_SOCKET_IFNAME", "lo");
            environment.put("NCCL_NVLS_ENABLE", "0");
        }
        if (detail) {
            environment.put("JNCCL_DEBUG", "detail");
        }
        for (int i = 0; i < fault.length; i += 2) {
            environment.put(fault[i], fault[i + 1]);
        }
        return new MpiJobs(launcher, BACKEND, REAL_NCCL, environment);
    }

    @ParameterizedTest(name = "{0}, detail {1}")
    @MethodSource("jobs")
    void aRankThatSkipsACollectiveIsNamedWithItsLineOfUserCode(MpiJobs.Launcher launcher, boolean detail)
            throws Exception {
        String output = run(jobs(launcher, detail), "skip");
        assertEveryRankLeadsWith(output, neverReached(detail), 0, 1, 2);
    }

    @ParameterizedTest(name = "{0}, detail {1}")
    @MethodSource("jobs")
    void aRankThatLagsInUserCodeIsNamedWithItsLineOfUserCode(MpiJobs.Launcher launcher, boolean detail)
            throws Exception {
        String output = run(jobs(launcher, detail), "lag");
        assertEveryRankLeadsWith(output, neverReached(detail), 0, 1, 2);
    }

    /** The verdict on rank 2 idling: the others wait in transaction #2, or in its consistency check. */
    private static String neverReached(boolean detail) {
        return "rank 2 never reached " + (detail ? "the consistency check" : "transaction #2") + IN_IDLE;
    }

    @ParameterizedTest(name = "{0}, detail {1}")
    @MethodSource("jobs")
    void aRankThatReturnsEarlyIsNamedWithItsCount(MpiJobs.Launcher launcher, boolean detail) throws Exception {
        String output = run(jobs(launcher, detail), "early");
        String verdict = "rank 2 closed its communicator after 1 transaction(s)";
        assertEveryRankLeadsWith(output, verdict, 0, 1);
        assertTrue(output.contains("RETURNED rank=2"), output);
    }

    /**
     * Rank 2 all-reduces one element fewer. Real NCCL runs it without a check: it hangs (the watchdog's
     * diagnosis names both counts) or, as NCCL 2.28.3 did at world 3 on one GPU, completes it on every
     * rank with wrong results, which nothing but the consistency check can see. The emulation refuses it
     * as it meets the ranks' arguments, with its own verdict; the consistency check refuses it before
     * NCCL runs it.
     */
    @ParameterizedTest(name = "{0}, detail {1}")
    @MethodSource("jobs")
    void aMismatchedCountIsNamedWithBothCounts(MpiJobs.Launcher launcher, boolean detail) throws Exception {
        String output = run(jobs(launcher, detail), "mismatch");
        String shortCount = MpiVerdictRank.COUNT - 1 + "";
        if (detail) {
            assertEveryRankContains(output, "refused before NCCL ran it (consistency check", "rank 2 all-reduces "
                    + shortCount + " FP32");
        } else if (REAL_NCCL && output.contains("COMPLETED rank=")) {
            for (int rank = 0; rank < WORLD; rank++) {
                assertTrue(output.contains("COMPLETED rank=" + rank + ": transaction #2"), "rank " + rank + "\n" + output);
            }
            System.out.println("NCCL completed the mismatched all-reduce on every rank: only jnccl.debug=detail sees it");
        } else if (REAL_NCCL) {
            assertEveryRankLeadsWith(output, "transaction #2 differs: ", 0, 1, 2);
            assertEveryRankContains(output, "rank 2 allReduce SUM FP32 " + shortCount + " elements");
        } else {
            assertEveryRankContains(output, "collective #", " differs", "rank 2 ncclAllReduce " + shortCount);
        }
        assertTrue(REAL_NCCL && !detail || !output.contains("COMPLETED rank="), output);
    }

    @ParameterizedTest(name = "{0}, detail {1}")
    @MethodSource("jobs")
    void everyRankStuckInACollectiveBlamesNcclOrTheTransport(MpiJobs.Launcher launcher, boolean detail)
            throws Exception {
        assumeTrue(!REAL_NCCL, "needs the host emulation's fault JNCCL_HOST_FAULT=hang");
        String output = run(jobs(launcher, detail, "JNCCL_HOST_FAULT", "hang", "JNCCL_HOST_FAULT_RANK", "2",
                "JNCCL_HOST_FAULT_AT", "2"), "stuck");
        assertEveryRankLeadsWith(output, "every rank is inside transaction #2 with the same commands: NCCL or the"
                + " transport is stuck (allReduce SUM FP32 " + MpiVerdictRank.COUNT + " elements ("
                + 4 * MpiVerdictRank.COUNT + " bytes))", reported(output));
    }

    /**
     * Rank 2 is SIGKILLed after the first collective, under a launcher that lets the others run on
     * (Open MPI's {@code --enable-recovery}): each survivor's exception names rank 2 as gone, by the
     * verdict ("gave no summary: its process is gone") or, when the host emulation noticed the death
     * first, by NCCL's asynchronous error ("rank 2 (pid P) exited"); the survivors end the job. Its
     * exit code is not checked: with recovery on, Open MPI 4.1's mpirun exits 0 after MPI_Abort. A
     * launcher that kills the job at a death (the default of both; MPICH's hydra even with
     * {@code -disable-auto-cleanup}, as seen here) ends the survivors before anyone can say anything.
     */
    @ParameterizedTest(name = "{0}, detail {1}")
    @MethodSource("jobs")
    void aKilledRankIsNamedAsGone(MpiJobs.Launcher launcher, boolean detail) throws Exception {
        assumeTrue(launcher == MpiJobs.Launcher.OPEN_MPI, "MPICH's hydra ends the survivors when a rank is killed");
        assumeDevices();
        try (MpiJobs.Job job = jobs(launcher, detail).survivorsRunOn().start(MpiVerdictRank.class, "killed", WORLD)) {
            Matcher running = job.awaitLine("RUNNING pid=(\\d+)", MpiWorldsChecks.JOB_TIMEOUT);
            ProcessHandle.of(Long.parseLong(running.group(1))).ifPresent(ProcessHandle::destroyForcibly); // SIGKILL
            job.awaitExit(Duration.ofSeconds(END_SECONDS + 20));
            String output = job.output();
            assertFalse(output.contains("UNEXPECTED"), output);
            assertTrue(output.contains("ending the MPI job (MPI_Abort"), output);
            Pattern gone = Pattern.compile("rank 2 gave no summary: its process is gone|rank 2 \\(pid "
                    + running.group(1) + "\\) exited");
            for (int rank = 0; rank < 2; rank++) {
                Matcher line = Pattern.compile("(?m)ABORTED rank=" + rank + " (.*)$").matcher(output);
                assertTrue(line.find() && gone.matcher(line.group(1)).find(), "rank " + rank + "\n" + output);
            }
            job.assertNoRankLeft(Duration.ofSeconds(15));
        }
    }

    /** The job's output, once it ended non-zero within {@link #END_SECONDS} of the second collective's start. */
    private static String run(MpiJobs jobs, String scenario) throws Exception {
        assumeDevices();
        try (MpiJobs.Job job = jobs.start(MpiVerdictRank.class, scenario, WORLD)) {
            String output = MpiWorldsChecks.awaitFailureWithin(job, "(?m)^PID \\d+$", END_SECONDS + 60);
            assertFalse(output.contains("UNEXPECTED"), output);
            assertTrue(output.contains("ending the MPI job (MPI_Abort"), output);
            job.assertNoRankLeft(Duration.ofSeconds(15));
            return output;
        }
    }

    /**
     * The ranks that printed their exception. Where every rank hangs, each rank's own watchdog may fire
     * and the job's MPI_Abort can end a rank before it prints, so at least one must have, and every one
     * that did is checked.
     */
    private static int[] reported(String output) {
        int[] ranks = Pattern.compile("(?m)ABORTED rank=(\\d+) ").matcher(output).results()
                .mapToInt(m -> Integer.parseInt(m.group(1))).distinct().toArray();
        assertTrue(ranks.length > 0, "no rank reported an exception\n" + output);
        return ranks;
    }

    /** On the emulation one process per device (its devices, inherited by the job); real NCCL shares GPU 0. */
    private static void assumeDevices() {
        if (!REAL_NCCL) {
            Packs.assumeDevices(WORLD);
        }
    }

    /** Every rank printed an exception whose message contains each of {@code parts}. */
    private static void assertEveryRankContains(String output, String... parts) {
        for (int rank = 0; rank < WORLD; rank++) {
            Matcher line = Pattern.compile("(?m)ABORTED rank=" + rank + " (.*)$").matcher(output);
            assertTrue(line.find(), "rank " + rank + " reported no exception\n" + output);
            for (String part : parts) {
                assertTrue(line.group(1).contains(part), "rank " + rank + " lacks '" + part + "': " + line.group(1));
            }
        }
    }

    /**
     * Each of {@code ranks} printed the message of its exception, whose first line starts with
     * {@code verdict}, as does the verdict of the diagnosis the exception carries; the verdict is the
     * same on every rank.
     */
    static void assertEveryRankLeadsWith(String output, String verdict, int... ranks) {
        Map<Integer, String> firstLines = new TreeMap<>();
        Matcher m = Pattern.compile("(?m)ABORTED rank=(\\d+) (.*)$").matcher(output);
        while (m.find()) {
            firstLines.putIfAbsent(Integer.parseInt(m.group(1)), m.group(2));
        }
        String first = null;
        for (int rank : ranks) {
            String line = firstLines.get(rank);
            assertTrue(line != null, "rank " + rank + " reported no exception\n" + output);
            String lead = line.substring(0, line.indexOf(" | "));
            assertTrue(lead.startsWith(verdict), "rank " + rank + ": " + line + "\n" + output);
            assertTrue(line.endsWith(" | diagnosis: " + lead), "rank " + rank + ": " + line);
            assertTrue(first == null || first.equals(lead), "rank " + rank + " says " + lead + ", another " + first);
            first = lead;
        }
        System.out.println("verdict: " + first);
    }
}
