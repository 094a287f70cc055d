package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.RankSummary.Activity;
import dev.jnccl.RankSummary.Status;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.testsupport.NativeEnv;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import jdk.jfr.Recording;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordingFile;
import org.junit.jupiter.api.Test;

/**
 * The diagnosis of a watchdog's abort on core's own launchers, which have no channel between the
 * ranks: a world of one knows every rank (itself), ranks of a launcher with no channel say that the
 * verdict is their own view only. Injected hangs of the host emulation; the thread's stack and the
 * JFR event {@code jnccl.Diagnosis} are checked too. (Threads mode's exchange, and the location in
 * user code, which these tests in jnccl's own package have not: the integration tests.)
 */
class DiagnosisTest {
    private static final CommunicatorOptions OPTIONS = CommunicatorOptions.defaults()
            .withWatchdog(Duration.ofSeconds(1)).withWatchdogInterval(Duration.ofMillis(50))
            .withCloseTimeout(Duration.ofSeconds(2));

    @Test
    void aWorldOfOneNamesTheStuckTransactionLocatesTheWaitAndRecordsTheEvent() throws Exception {
        Path file = Files.createTempFile("jnccl-diagnosis-", ".jfr");
        try (Recording recording = new Recording()) {
            recording.enable("jnccl.Diagnosis");
            recording.start();
            CommunicatorAbortedException e;
            int line;
            try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_FAULT", "hang", "JNCCL_HOST_FAULT_RANK", "0",
                    "JNCCL_HOST_FAULT_AT", "2");
                 Communicator comm = Communicator.single(0, OPTIONS); CudaStream stream = CudaStream.create();
                 DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 64)) {
                comm.allReduce(memory.tensor(DType.FP32), ReduceOp.MAX, stream);
                comm.synchronize(); // #1 completes: the diagnosis knows it exactly
                comm.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM, stream);
                line = new Throwable().getStackTrace()[0].getLineNumber() + 2;
                try {
                    comm.synchronize();
                    throw new AssertionError("synchronize returned although transaction #2 hangs");
                } catch (CommunicatorAbortedException aborted) {
                    e = aborted;
                }
            }
            recording.stop();
            recording.dump(file);
            Diagnosis diagnosis = e.diagnosis().orElseThrow(() -> new AssertionError("no diagnosis: " + e));
            String verdict = "the only rank is inside transaction #2: NCCL or the transport is stuck (allReduce SUM FP32"
                    + " 64 elements (256 bytes))";
            assertEquals(verdict, diagnosis.verdict());
            assertEquals(verdict, e.getMessage().lines().findFirst().orElseThrow(), e.getMessage());
            assertTrue(e.getMessage().contains("watchdog: transaction #2 not complete after"), e.getMessage());
            assertTrue(diagnosis.complete());
            RankSummary own = diagnosis.summaries().getFirst();
            assertEquals(List.of(0, Status.OPEN, 2L, 1L, Activity.WAIT, "synchronize"), List.of(own.rank(), own.status(),
                    own.executed(), own.completed(), own.activity(), own.call()), own.describe());
            // Core's tests are in jnccl's own package (their location is JUnit's frame): the frame is in the stack.
            String frame = "dev.jnccl.DiagnosisTest.aWorldOfOneNamesTheStuckTransactionLocatesTheWaitAndRecordsTheEvent"
                    + "(DiagnosisTest.java:" + line + ")";
            assertTrue(own.stack().contains(frame), frame + " not in " + own.stack());
            assertEquals(List.of(new RankSummary.Pending(2, List.of("allReduce SUM FP32 64 elements (256 bytes)"))),
                    own.pending());
            RecordedEvent event = only(RecordingFile.readAllEvents(file), "jnccl.Diagnosis");
            assertEquals(verdict, event.getString("verdict"));
            assertEquals(0, event.getInt("rank"));
            assertTrue(event.getBoolean("complete"));
            assertTrue(event.getString("trigger").startsWith("watchdog: transaction #2 not complete"),
                    event.getString("trigger"));
            assertTrue(event.getString("summaries").contains("rank 0 of 1: open, executed 2, completed 1"),
                    event.getString("summaries"));
        } finally {
            Files.deleteIfExists(file);
        }
    }

    @Test
    void ranksWithNoChannelBetweenThemGiveTheirOwnViewOnly() throws Exception {
        List<Object> results;
        try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_FAULT", "hang", "JNCCL_HOST_FAULT_RANK", "1",
                "JNCCL_HOST_FAULT_AT", "1")) {
            results = LocalRanks.run(2, OPTIONS, comm -> {
                try (CudaStream stream = CudaStream.create(); DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 64)) {
                    comm.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM, stream);
                    comm.synchronize();
                    return "completed";
                }
            });
        }
        int diagnosed = 0;
        for (int rank = 0; rank < results.size(); rank++) {
            CommunicatorAbortedException e = assertInstanceOf(CommunicatorAbortedException.class, results.get(rank));
            // A rank whose peer aborted first may end by NCCL's error ("rank r aborted") before its watchdog.
            if (e.diagnosis().isEmpty()) {
                continue;
            }
            diagnosed++;
            Diagnosis diagnosis = e.diagnosis().get();
            assertFalse(diagnosis.complete());
            assertEquals(1, diagnosis.summaries().size());
            assertEquals("rank " + rank + "'s view only (no channel to the other ranks): transaction #1 is not complete"
                    + " (allReduce SUM FP32 64 elements (256 bytes)); it waits in synchronize", diagnosis.verdict());
            assertTrue(e.getMessage().startsWith(diagnosis.verdict() + "\n"), e.getMessage());
        }
        assertTrue(diagnosed > 0, "no rank diagnosed its abort: " + results);
    }

    private static RecordedEvent only(List<RecordedEvent> events, String name) {
        List<RecordedEvent> matching = events.stream().filter(e -> e.getEventType().getName().equals(name)).toList();
        assertEquals(1, matching.size(), name + " events: " + matching);
        return matching.getFirst();
    }
}
