package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The consistency check in MPI mode, turned on by the environment variable alone
 * ({@code JNCCL_DEBUG=detail}, passed to every process by the launcher): at world 3, rank 1
 * all-reduces 4095 elements while ranks 0 and 2 all-reduce 4096. The ranks compare their commands
 * over MPI before NCCL runs them; the verdict aborts the communicator, which ends the job with
 * MPI_Abort, and the log carries the verdict; the emulation never sees the mismatched all-reduce
 * (its own verdict, "collective #N differs", would say so). Skipped where a launcher is missing.
 */
@Timeout(value = 300, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class MpiConsistencyCheckTest {
    private static final String VERDICT = " refused before NCCL ran it (consistency check, jnccl.debug=detail): the"
            + " count of collective 1 differs: rank 1 all-reduces 4095 FP32 with SUM; ranks 0 and 2 all-reduce 4096"
            + " FP32 with SUM";

    @ParameterizedTest
    @EnumSource(MpiJobs.Launcher.class)
    void aMismatchEndsTheJobBeforeNcclWithTheVerdict(MpiJobs.Launcher launcher) throws Exception {
        Packs.assumeDevices(3); // one process per device (the emulation's devices, inherited by the job)
        MpiJobs jobs = new MpiJobs(launcher, "host", false, Map.of("JNCCL_DEBUG", "detail"));
        try (MpiJobs.Job job = jobs.start("mismatch", 3)) {
            job.awaitLine("(?m)^STARTED rank=", Duration.ofSeconds(120));
            int exit = job.awaitExit(Duration.ofSeconds(60));
            String output = job.output();
            assertNotEquals(0, exit, job.name + ": exit code\n" + output);
            assertTrue(Pattern.compile("aborting communicator: transaction #\\d+" + Pattern.quote(VERDICT))
                    .matcher(output).find(), job.name + ": no verdict\n" + output);
            assertTrue(output.contains("ending the MPI job (MPI_Abort"), output);
            assertFalse(Pattern.compile("collective #\\d+ differs").matcher(output).find(),
                    job.name + ": the all-reduce reached the emulation\n" + output);
            assertFalse(output.contains("UNEXPECTED"), output);
            job.assertNoRankLeft(Duration.ofSeconds(15));
        }
    }
}
