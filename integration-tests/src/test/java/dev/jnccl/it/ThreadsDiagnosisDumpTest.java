package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DeviceTensor;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.it.ThreadsFailureTest.Outcome;
import dev.jnccl.testsupport.ChildJvm;
import dev.jnccl.threads.ThreadsOptions;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;

/**
 * The diagnosis dumps of a real hang (threads mode, world 3, rank 2 skips a collective): every rank
 * writes its file at the watchdog's first sign of the hang, before the abort, and again at the abort;
 * the offline tool ({@code scripts/diagnose.sh}'s main class, run as a separate JVM) merges the folder
 * into the verdict every rank's exception carries, also once a rank's file is deleted, and names the
 * rank whose file is missing.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsDiagnosisDumpTest {
    private static final int WORLD = 3;
    private static final int CULPRIT = 2;
    private static final int N = 840 * WORLD;
    private static final Duration WATCHDOG = Duration.ofSeconds(2);

    @RegisterExtension
    final PackMemory memory = new PackMemory();

    /** The offline tool on {@code folder}: its exit status and output. */
    static ChildJvm.Result diagnose(Path folder) throws IOException, InterruptedException {
        return ChildJvm.runNamed(List.of(), Map.of(), Communicator.class, "dev.jnccl.DiagnoseDumps", folder.toString());
    }

    /** The tool's verdict on {@code folder}, which must be exit 0 and a first line "verdict: ...". */
    static String verdictOf(Path folder) throws IOException, InterruptedException {
        ChildJvm.Result result = diagnose(folder);
        assertEquals(0, result.exitCode(), result.output());
        String first = result.output().lines().findFirst().orElse("");
        assertTrue(first.startsWith("verdict: "), result.output());
        System.out.println("diagnose " + folder + ":\n" + result.output());
        return first.substring("verdict: ".length());
    }

    @Test
    void theToolMergesTheDumpsOfARealHangIntoTheLiveVerdict(@TempDir Path folder) throws Exception {
        AtomicReference<String> firstSign = new AtomicReference<>("(none seen)");
        ThreadsOptions options = ThreadsOptions.defaults().withCommunicator(CommunicatorOptions.defaults()
                .withWatchdog(WATCHDOG).withWatchdogInterval(Duration.ofMillis(50)).withDiagnosisDirectory(folder));
        Outcome outcome = ThreadsFailureTest.runFailing(WORLD, options, comm -> {
            DeviceTensor tensor = memory.fp32(N);
            try (CudaStream stream = CudaStream.create()) {
                comm.allReduce(tensor, ReduceOp.MAX, stream);
                comm.synchronize();
                if (comm.rank() == CULPRIT) {
                    firstSign.set(awaitFirstSign(folder.resolve("jnccl-rank-0-of-3.json")));
                } else {
                    comm.allReduce(tensor, ReduceOp.SUM, stream);
                }
                comm.synchronize();
            }
            fail("rank " + comm.rank() + ": synchronize returned although rank " + CULPRIT + " skipped transaction #2");
        });
        String live = assertInstanceOf(CommunicatorAbortedException.class, outcome.thrown()).diagnosis().orElseThrow()
                .verdict();
        assertTrue(live.startsWith("rank " + CULPRIT + " never reached transaction #2 (it is in user code: at"
                + " ThreadsDiagnosisDumpTest."), live);
        assertTrue(firstSign.get().contains("\"trigger\": \"first sign of a hang"), firstSign.get());
        assertTrue(firstSign.get().contains("\"status\": \"OPEN\""), firstSign.get());
        for (int r = 0; r < WORLD; r++) {
            String file = Files.readString(folder.resolve("jnccl-rank-" + r + "-of-3.json"));
            assertTrue(file.contains("\"trigger\": \"abort\""), file);
            assertTrue(file.contains("\"verdict\": \"" + live.replace("\"", "\\\"") + "\""), file);
        }
        assertEquals(live, verdictOf(folder));
        Files.delete(folder.resolve("jnccl-rank-" + CULPRIT + "-of-3.json"));
        ChildJvm.Result withoutCulprit = diagnose(folder);
        assertTrue(withoutCulprit.output().startsWith("verdict: " + live + "\n2 of 3 rank(s) left a file"),
                withoutCulprit.output());
        assertTrue(withoutCulprit.output().contains("no file; a peer's diagnosis"), withoutCulprit.output());
    }

    /**
     * The culprit's user code: waits (bounded) until rank 0's first-sign dump is there, returns its
     * text, then idles until the failing pack interrupts it.
     */
    private static String awaitFirstSign(Path file) {
        long deadline = System.nanoTime() + WATCHDOG.toNanos();
        String text = "(no file within the watchdog's timeout)";
        try {
            while (System.nanoTime() < deadline) {
                if (Files.exists(file)) {
                    text = Files.readString(file);
                    break;
                }
                Thread.sleep(10);
            }
            Thread.sleep(WATCHDOG.multipliedBy(3));
        } catch (InterruptedException e) {
            Thread.interrupted(); // the pack's interrupt: it failed; the synchronize after says why
        } catch (IOException e) {
            text = e.toString();
        }
        return text;
    }

    @Test
    void theToolRefusesAFolderWithoutDumps(@TempDir Path folder) throws Exception {
        ChildJvm.Result result = diagnose(folder);
        assertEquals(2, result.exitCode(), result.output());
        assertTrue(result.output().contains("diagnose: no jnccl-rank-R-of-W.json file in " + folder), result.output());
        result = diagnose(folder.resolve("absent"));
        assertEquals(2, result.exitCode(), result.output());
    }
}
