package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import dev.jnccl.testsupport.ChildJvm;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The diagnosis dumps of an MPI job whose rank 2 of 3 is SIGKILLed mid-run ({@link MpiRank}
 * {@code killed}, watchdog 3 s, {@code -Djnccl.diagnosis.dir}): the surviving ranks leave their files
 * (at the abort: the emulation reports the peer's exit as NCCL's asynchronous error at once; a hang
 * NCCL does not report is dumped at the watchdog's first sign, before MPI_Abort ends the job), the
 * killed rank none, and the offline tool over the folder names rank 2 as the rank that gave no summary.
 */
@Timeout(value = 180, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class MpiDiagnosisDumpTest {

    @ParameterizedTest
    // Open MPI only: MPICH's launcher SIGKILLs every other process the moment one is killed, so no rank lives
    // on to write a file (nothing to diagnose offline there but the launcher's own message).
    @EnumSource(value = MpiJobs.Launcher.class, names = "OPEN_MPI")
    void theToolOverAKilledJobsFolderNamesTheKilledRank(MpiJobs.Launcher launcher, @TempDir Path folder)
            throws Exception {
        assumeFalse(Packs.SHARE_DEVICES, "one device per process: runs in the default execution");
        MpiJobs jobs = new MpiJobs(launcher, "host", false, Map.of());
        try (MpiJobs.Job job = jobs.start("killed", 3, "-Djnccl.diagnosis.dir=" + folder)) {
            Matcher running = job.awaitLine("RUNNING rank=2 pid=(\\d+)", Duration.ofSeconds(120));
            ProcessHandle.of(Long.parseLong(running.group(1))).ifPresent(ProcessHandle::destroyForcibly); // SIGKILL
            int exit = job.awaitExit(Duration.ofSeconds(3 + 30));
            assertNotEquals(0, exit, job.name + ": exit code\n" + job.output());
            job.assertNoRankLeft(Duration.ofSeconds(15));
            assertFalse(Files.exists(folder.resolve("jnccl-rank-2-of-3.json")), "the killed rank wrote no file");
            assertTrue(Files.exists(folder.resolve("jnccl-rank-0-of-3.json"))
                    || Files.exists(folder.resolve("jnccl-rank-1-of-3.json")), job.name + ": no survivor left a file\n"
                    + job.output());
        }
        ChildJvm.Result result = ThreadsDiagnosisDumpTest.diagnose(folder);
        System.out.println(launcher + ": diagnose " + folder + ":\n" + result.output());
        assertEquals(0, result.exitCode(), result.output());
        assertTrue(result.output().startsWith("verdict: rank 2 gave no summary: it left no file"), result.output());
        assertTrue(result.output().matches("(?s).*\n   2  no file +absent .*"), result.output());
        assertTrue(result.output().matches("(?s).*\n   [01]  its file +(open|aborted) .*"), result.output());
    }
}
