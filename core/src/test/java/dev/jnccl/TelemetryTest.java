package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import jdk.jfr.Recording;
import jdk.jfr.consumer.RecordedEvent;
import jdk.jfr.consumer.RecordingFile;
import org.junit.jupiter.api.Test;

/** The JFR events of a communicator's life: init, transactions (with sizes), abort. */
class TelemetryTest {

    @Test
    void initTransactionAndAbortAreRecorded() throws Exception {
        Path file = Files.createTempFile("jnccl-telemetry-", ".jfr");
        try (Recording recording = new Recording()) {
            recording.enable("jnccl.CommInit");
            recording.enable("jnccl.Transaction");
            recording.enable("jnccl.Abort");
            recording.start();
            try (Communicator comm = Communicator.single(0); CudaStream stream = CudaStream.create();
                 DeviceMemory memory = DeviceMemory.allocate(DType.BF16, 512); CudaEvent signal = CudaEvent.create()) {
                try (Transaction tx = comm.begin(stream)) {
                    tx.reduceScatter(memory.tensor(DType.BF16));
                    tx.allGather(memory.tensor(DType.BF16), memory.tensor(DType.BF16));
                    tx.execute(signal);
                }
                comm.await(signal);
                comm.abort("telemetry test");
            }
            recording.stop();
            recording.dump(file);
            List<RecordedEvent> events = RecordingFile.readAllEvents(file);
            RecordedEvent init = only(events, "jnccl.CommInit");
            assertEquals(0, init.getInt("rank"));
            assertEquals(1, init.getInt("worldSize"));
            assertTrue(init.getString("ncclVersion").startsWith("2."), init.getString("ncclVersion"));
            RecordedEvent transaction = only(events, "jnccl.Transaction");
            assertEquals(1L, transaction.getLong("sequence"));
            assertEquals(2, transaction.getInt("commands"));
            assertEquals(2 * 512 * 2L, transaction.getLong("bytes"));
            assertEquals("[ReduceScatter, AllGather]", transaction.getString("operations"));
            assertEquals("", transaction.getString("graph"));
            assertEquals("telemetry test", only(events, "jnccl.Abort").getString("reason"));
        } finally {
            Files.deleteIfExists(file);
        }
    }

    @Test
    void aCapturedTransactionAndItsReplaysSayWhichGraph() throws Exception {
        Path file = Files.createTempFile("jnccl-telemetry-graph-", ".jfr");
        long graphId;
        try (Recording recording = new Recording()) {
            recording.enable("jnccl.Transaction");
            recording.start();
            try (Communicator comm = Communicator.single(0); CudaStream stream = CudaStream.create();
                 DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 256)) {
                try (CudaGraph graph = CudaGraph.capture(stream,
                        () -> comm.allReduce(memory.tensor(DType.FP32), ReduceOp.SUM, stream))) {
                    graphId = graph.id();
                    comm.launch(graph, stream);
                    comm.launch(graph, stream);
                    stream.synchronize();
                }
            }
            recording.stop();
            recording.dump(file);
            List<String> graphs = RecordingFile.readAllEvents(file).stream()
                    .filter(e -> e.getEventType().getName().equals("jnccl.Transaction"))
                    .map(e -> e.getLong("sequence") + " " + e.getString("operations") + " " + e.getString("graph"))
                    .toList();
            assertEquals(List.of("1 [AllReduce] captured into graph #" + graphId,
                    "2 [AllReduce] replay of graph #" + graphId, "3 [AllReduce] replay of graph #" + graphId), graphs);
        } finally {
            Files.deleteIfExists(file);
        }
    }

    private static RecordedEvent only(List<RecordedEvent> events, String name) {
        List<RecordedEvent> matching = events.stream().filter(e -> e.getEventType().getName().equals(name)).toList();
        assertEquals(1, matching.size(), name + " events: " + matching);
        return matching.getFirst();
    }
}
