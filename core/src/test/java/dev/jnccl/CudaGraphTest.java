package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.cuda.Cuda;
import dev.jnccl.testsupport.NativeEnv;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaException;
import dev.jnccl.cuda.CudaGraph;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.Arrays;
import java.util.Random;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link CudaGraph}: copies and memsets captured once and replayed, a world-1 transaction captured
 * and replayed against the same transaction run eagerly, and the calls jnccl refuses during a
 * capture. Random data, compared element by element. Runs on whatever backend {@code jnccl.backend}
 * resolves to (the host emulation on CI); {@link GpuCudaGraphTest} runs it on a GPU.
 */
@Timeout(120)
class CudaGraphTest {
    static final int COUNT = 4099 * 4;
    static final int LAUNCHES = 5;

    CudaStream stream;
    Arena arena;
    Random random;

    @BeforeEach
    void open() {
        Cuda.setDevice(0);
        stream = CudaStream.create();
        arena = Arena.ofConfined();
        random = new Random(System.nanoTime());
    }

    @AfterEach
    void close() {
        if (stream != null) {
            stream.synchronize();
        }
        if (stream != null) {
            stream.close();
        }
        if (arena != null) {
            arena.close();
        }
    }

    private MemorySegment randomFloats() {
        return TestData.random(arena, DType.FP32, COUNT, random);
    }

    private DeviceMemory upload(MemorySegment host) {
        DeviceMemory memory = DeviceMemory.allocate(host.byteSize());
        memory.copyFromHost(host);
        return memory;
    }

    private float[] download(DeviceMemory memory) {
        MemorySegment host = arena.allocate(memory.bytes());
        memory.copyToHost(host);
        return host.toArray(ValueLayout.JAVA_FLOAT);
    }

    @Test
    void capturedCopiesAndFillRunOnlyAtEachLaunch() {
        MemorySegment initial = randomFloats();
        byte fill = (byte) (random.nextInt(255) + 1);
        try (DeviceMemory source = upload(randomFloats()); DeviceMemory middle = DeviceMemory.allocate(initial.byteSize());
             DeviceMemory target = upload(initial); DeviceMemory filled = upload(initial)) {
            CudaGraph graph = CudaGraph.capture(stream, () -> {
                assertTrue(stream.isCapturing());
                stream.copyAsync(source.tensor(DType.FP32), middle.tensor(DType.FP32));
                filled.fill(fill, stream);
                stream.copyAsync(middle.tensor(DType.FP32), target.tensor(DType.FP32));
            });
            try (graph) {
                assertFalse(stream.isCapturing());
                stream.synchronize();
                float[] before = initial.toArray(ValueLayout.JAVA_FLOAT);
                assertArrayEquals(before, download(target), "the capture ran the copies");
                assertArrayEquals(before, download(filled), "the capture ran the fill");
                for (int launch = 0; launch < LAUNCHES; launch++) {
                    MemorySegment data = randomFloats();
                    source.copyFromHost(data);
                    graph.launch(stream);
                    stream.synchronize();
                    float[] expected = data.toArray(ValueLayout.JAVA_FLOAT);
                    float[] actual = download(target);
                    for (int i = 0; i < COUNT; i++) {
                        assertEquals(Float.floatToRawIntBits(expected[i]), Float.floatToRawIntBits(actual[i]),
                                "launch " + launch + ", element " + i);
                    }
                    MemorySegment bytes = arena.allocate(filled.bytes());
                    filled.copyToHost(bytes);
                    for (long i = 0; i < bytes.byteSize(); i++) {
                        assertEquals(fill, bytes.get(ValueLayout.JAVA_BYTE, i), "fill, byte " + i);
                    }
                }
            }
            assertTrue(graph.isClosed());
        }
    }

    /**
     * One step: copy new data in, reduce-scatter + all-gather in one transaction whose ready event is
     * recorded on the capturing stream (the comms stream joins the capture through it), the
     * signal waited for on the capturing stream (the join back), copy the result out.
     */
    private static void step(Communicator comm, CudaStream stream, CudaEvent ready, CudaEvent signal,
                             DeviceMemory in, DeviceMemory work, DeviceMemory out) {
        DeviceTensor tensor = work.tensor(DType.FP32);
        stream.copyAsync(in.tensor(DType.FP32), tensor);
        ready.record(stream);
        comm.begin(ready).reduceScatter(tensor).allGather(tensor.shard(0, 1), tensor).execute(signal);
        stream.waitFor(signal);
        stream.copyAsync(tensor, out.tensor(DType.FP32));
    }

    Communicator communicator(CommunicatorOptions options) {
        return Communicator.single(0, options);
    }

    @Test
    void capturedTransactionReplaysAsTheEagerOne() {
        // A 1 ms watchdog interval: its probes run while the capture is open (the body sleeps), which
        // must neither abort the communicator nor break the capture.
        CommunicatorOptions options = CommunicatorOptions.defaults().withWatchdogInterval(Duration.ofMillis(1));
        MemorySegment initial = randomFloats();
        try (Communicator comm = communicator(options); CudaEvent ready = CudaEvent.create();
             CudaEvent signal = CudaEvent.create(); DeviceMemory in = upload(randomFloats());
             DeviceMemory work = DeviceMemory.allocate(initial.byteSize()); DeviceMemory out = upload(initial);
             DeviceMemory eagerOut = upload(initial)) {
            CudaGraph graph = CudaGraph.capture(stream, () -> {
                step(comm, stream, ready, signal, in, work, out);
                sleepMillis(30);
            });
            try (graph) {
                stream.synchronize();
                assertArrayEquals(initial.toArray(ValueLayout.JAVA_FLOAT), download(out), "the capture ran the step");
                for (int launch = 0; launch < LAUNCHES; launch++) {
                    in.copyFromHost(randomFloats());
                    graph.launch(stream);
                    stream.synchronize();
                    float[] replayed = download(out);
                    step(comm, stream, ready, signal, in, work, eagerOut);
                    stream.synchronize();
                    float[] eager = download(eagerOut);
                    for (int i = 0; i < COUNT; i++) {
                        assertEquals(Float.floatToRawIntBits(eager[i]), Float.floatToRawIntBits(replayed[i]),
                                "launch " + launch + ", element " + i);
                    }
                }
                comm.synchronize();
                assertFalse(comm.isAborted(), "aborted: " + comm.recentTransactions());
            }
        }
    }

    @Test
    void capturedConvenienceOperationReplays() {
        try (Communicator comm = communicator(CommunicatorOptions.defaults()); DeviceMemory in = upload(randomFloats());
             DeviceMemory work = DeviceMemory.allocate(in.bytes()); DeviceMemory out = DeviceMemory.allocate(in.bytes())) {
            // runOrdered records its ready event on the capturing stream and joins back through waitOnComms.
            try (CudaGraph graph = CudaGraph.capture(stream, () -> {
                stream.copyAsync(in.tensor(DType.FP32), work.tensor(DType.FP32));
                comm.allReduce(work.tensor(DType.FP32), ReduceOp.MAX, stream);
                stream.copyAsync(work.tensor(DType.FP32), out.tensor(DType.FP32));
            })) {
                for (int launch = 0; launch < LAUNCHES; launch++) {
                    MemorySegment data = randomFloats();
                    in.copyFromHost(data);
                    graph.launch(stream);
                    stream.synchronize();
                    float[] expected = data.toArray(ValueLayout.JAVA_FLOAT); // world 1: the identity
                    float[] actual = download(out);
                    for (int i = 0; i < COUNT; i++) {
                        assertEquals(Float.floatToRawIntBits(expected[i]), Float.floatToRawIntBits(actual[i]),
                                "launch " + launch + ", element " + i);
                    }
                }
            }
        }
    }

    @Test
    void aReadyEventRecordedOutsideTheCaptureBecomesAnExternalWait() {
        try (Communicator comm = communicator(CommunicatorOptions.defaults()); CudaEvent ready = CudaEvent.create();
             CudaEvent outside = CudaEvent.create(); CudaEvent signal = CudaEvent.create();
             CudaStream producer = CudaStream.create(); DeviceMemory in = upload(randomFloats());
             DeviceMemory staging = DeviceMemory.allocate(in.bytes());
             DeviceMemory work = DeviceMemory.allocate(in.bytes()); DeviceMemory out = DeviceMemory.allocate(in.bytes())) {
            DeviceTensor tensor = work.tensor(DType.FP32);
            outside.record(producer);
            // A plain wait on "outside" would be CUDA's isolation error (905): the comms stream, already in
            // the capture through "ready", waits on it as an external event at each launch instead.
            try (CudaGraph graph = CudaGraph.capture(stream, () -> {
                ready.record(stream);
                comm.begin(ready).allReduce(tensor, ReduceOp.SUM).execute(null); // the comms stream joins
                comm.begin(outside).allReduce(in.tensor(DType.FP32), tensor, ReduceOp.MAX).execute(signal);
                stream.waitFor(signal);
                stream.copyAsync(tensor, out.tensor(DType.FP32));
            })) {
                for (int launch = 0; launch < LAUNCHES; launch++) {
                    MemorySegment data = randomFloats();
                    // The producer's copy is what "outside" marks: each launch waits for its newest record.
                    staging.copyFromHost(data);
                    producer.copyAsync(staging.tensor(DType.FP32), in.tensor(DType.FP32));
                    outside.record(producer);
                    comm.launch(graph, stream);
                    stream.synchronize();
                    assertBits(data.toArray(ValueLayout.JAVA_FLOAT), download(out), "launch " + launch);
                }
            }
            assertFalse(comm.isAborted(), "aborted: " + comm.recentTransactions());
        }
    }

    private static void assertBits(float[] expected, float[] actual, String what) {
        assertEquals(expected.length, actual.length, what + ": length");
        for (int i = 0; i < expected.length; i++) {
            assertEquals(Float.floatToRawIntBits(expected[i]), Float.floatToRawIntBits(actual[i]),
                    what + ", element " + i);
        }
    }

    /**
     * K transactions chained through K + 1 buffers (reduce-scatter, all-gather, send/recv to itself,
     * in turn), each begun on the capturing stream, the comms stream joined back by waitOnComms.
     */
    static void chain(Communicator comm, CudaStream stream, DeviceTensor[] buffers) {
        for (int j = 0; j + 1 < buffers.length; j++) {
            DeviceTensor src = buffers[j];
            DeviceTensor dst = buffers[j + 1];
            Transaction transaction = comm.begin(stream);
            switch (j % 3) {
                case 0 -> transaction.reduceScatter(src, dst.shard(0, 1), ReduceOp.SUM);
                case 1 -> transaction.allGather(src.shard(0, 1), dst);
                default -> transaction.send(src, 0).recv(dst, 0);
            }
            transaction.execute(null);
        }
        comm.waitOnComms(stream);
    }

    @Test
    void stepsOfOneEightAndThirtyTwoTransactionsReplayAsTheEagerOnes() {
        try (Communicator comm = communicator(CommunicatorOptions.defaults())) {
            for (int k : new int[] {1, 8, 32}) {
                DeviceMemory[] captured = new DeviceMemory[k + 1];
                DeviceMemory[] eager = new DeviceMemory[k + 1];
                try {
                    for (int j = 0; j <= k; j++) {
                        MemorySegment initial = randomFloats();
                        captured[j] = upload(initial);
                        eager[j] = upload(initial);
                    }
                    DeviceTensor[] capturedTensors = tensors(captured);
                    DeviceTensor[] eagerTensors = tensors(eager);
                    try (CudaGraph graph = CudaGraph.capture(stream, () -> chain(comm, stream, capturedTensors))) {
                        for (int launch = 0; launch < LAUNCHES; launch++) {
                            MemorySegment input = randomFloats();
                            captured[0].copyFromHost(input);
                            eager[0].copyFromHost(input);
                            comm.launch(graph, stream);
                            if (launch == 0) {
                                String dump = comm.recentTransactions();
                                assertTrue(dump.contains("captured into graph #" + graph.id())
                                        && dump.contains("replay of graph #" + graph.id()), dump);
                            }
                            chain(comm, stream, eagerTensors);
                            stream.synchronize();
                            for (int j = 0; j <= k; j++) {
                                assertBits(download(eager[j]), download(captured[j]),
                                        "K " + k + ", launch " + launch + ", buffer " + j);
                            }
                            assertBits(input.toArray(ValueLayout.JAVA_FLOAT), download(captured[k]),
                                    "K " + k + ", launch " + launch + ": world 1 passes the input through");
                        }
                    }
                } finally {
                    for (int j = 0; j <= k; j++) {
                        if (captured[j] != null) {
                            captured[j].close();
                        }
                        if (eager[j] != null) {
                            eager[j].close();
                        }
                    }
                }
            }
            assertFalse(comm.isAborted(), "aborted: " + comm.recentTransactions());
        }
    }

    /**
     * A replay waits for the comms stream only when something ran there since the last replay on its
     * stream. Each round: two replays back to back on one stream (the second skips the wait), a
     * transaction begun on another stream that overwrites the graph's input on the comms stream
     * (it must run after the replay before it), a replay that must wait for it. Then a replay on the
     * other stream (a different stream waits), after which {@code comm.synchronize()} alone must
     * cover it: a replay is the communicator's work, though the comms stream waits for it only
     * lazily. Each replay's output is checked element by element against the input it must have
     * seen. The graph reads its input with a copy, not NCCL: the emulation runs one communicator's
     * NCCL operations in the order they were posted whatever their streams, and delays each of them
     * here, so a replay that did not wait for the transaction would copy the input before the
     * transaction wrote it. (That same posting order keeps the transaction after the replay before
     * it on the emulation whether or not the comms stream waits for the replay: only a GPU checks
     * that wait by the data.)
     */
    @Test
    void aReplayWaitsForTheCommsStreamOnlyWhenWorkRanThereSinceTheLastReplayOnItsStream() {
        int rounds = 3;
        MemorySegment[] inputs = new MemorySegment[3 * rounds + 1];
        DeviceMemory[] staged = new DeviceMemory[inputs.length];
        DeviceMemory[] outputs = new DeviceMemory[3 * rounds];
        DeviceMemory[] buffers = new DeviceMemory[4]; // the input, then the chain's three
        try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_DELAY_RANK", "0", "JNCCL_HOST_DELAY_US", "3000");
             Communicator comm = communicator(CommunicatorOptions.defaults()); CudaStream other = CudaStream.create()) {
            try {
                for (int i = 0; i < inputs.length; i++) {
                    inputs[i] = randomFloats();
                    staged[i] = upload(inputs[i]);
                }
                uploadRandom(outputs);
                uploadRandom(buffers);
                DeviceTensor[] tensors = tensors(buffers);
                DeviceTensor[] chained = Arrays.copyOfRange(tensors, 1, tensors.length);
                float[] last;
                try (CudaGraph graph = CudaGraph.capture(stream, () -> {
                    stream.copyAsync(tensors[0], chained[0]);
                    chain(comm, stream, chained);
                })) {
                    replayRounds(comm, graph, other, tensors, tensors(staged), tensors(outputs), rounds);
                    stream.synchronize(); // the last copy-out reads what the next replay writes
                    last = replayOnAnotherStream(comm, graph, other, tensors, staged[3 * rounds].tensor(DType.FP32),
                            buffers[buffers.length - 1]);
                }
                for (int i = 0; i < outputs.length; i++) {
                    assertBits(inputs[i].toArray(ValueLayout.JAVA_FLOAT), download(outputs[i]), "replay " + i);
                }
                assertBits(inputs[3 * rounds].toArray(ValueLayout.JAVA_FLOAT), last,
                        "the replay on the other stream, after comm.synchronize()");
                assertFalse(comm.isAborted(), "aborted: " + comm.recentTransactions());
            } finally {
                stream.synchronize(); // no copy may still use the memory (after a failed assertion too)
                other.synchronize();
                comm.synchronize();
                closeAll(staged, outputs, buffers);
            }
        }
    }

    /** {@link #aReplayWaitsForTheCommsStreamOnlyWhenWorkRanThereSinceTheLastReplayOnItsStream}'s rounds, unsynchronized. */
    private void replayRounds(Communicator comm, CudaGraph graph, CudaStream other, DeviceTensor[] buffers,
                              DeviceTensor[] staged, DeviceTensor[] outputs, int rounds) {
        GraphReplays replays = comm.graphReplays();
        long waits = replays.commsWaits();
        DeviceTensor in = buffers[0];
        DeviceTensor out = buffers[buffers.length - 1];
        for (int r = 0; r < rounds; r++) {
            for (int i = 3 * r; i < 3 * r + 2; i++) {
                stream.copyAsync(staged[i], in);
                comm.launch(graph, stream);
                stream.copyAsync(out, outputs[i]);
            }
            assertEquals(waits + 1 + r, replays.commsWaits(), "round " + r + ": replays back to back on one stream waited");
            comm.begin(other).send(staged[3 * r + 2], 0).recv(in, 0).execute(null); // ordered by the communicator only
            comm.launch(graph, stream);
            stream.copyAsync(out, outputs[3 * r + 2]);
            assertEquals(waits + 2 + r, replays.commsWaits(), "round " + r + ": the replay after the transaction waited");
        }
    }

    /**
     * A replay on {@code other} of {@code input}, which waits for the comms stream (another stream
     * than the last replay's); {@return the graph's output read once {@code comm.synchronize()}
     * returned, {@code other} not synchronized}.
     */
    private float[] replayOnAnotherStream(Communicator comm, CudaGraph graph, CudaStream other, DeviceTensor[] buffers,
                                          DeviceTensor input, DeviceMemory output) {
        long waits = comm.graphReplays().commsWaits();
        other.copyAsync(input, buffers[0]);
        comm.launch(graph, other);
        assertEquals(waits + 1, comm.graphReplays().commsWaits(), "a replay on another stream waited");
        comm.synchronize();
        return download(output);
    }

    /**
     * The comms stream's wait for a replay, left for its next work, is not made inside a capture that
     * the comms stream joined (it would become a node of that graph and be gone for the replay): a
     * capture in between leaves it for later, and {@code comm.synchronize()} after the capture still
     * covers the replay. The emulation delays each NCCL operation, so a synchronize that did not wait
     * for the replay would read the output before the replay wrote it.
     */
    @Test
    void aReplayIsJoinedAfterACaptureOfTheCommsStreamNotInsideIt() {
        MemorySegment input = randomFloats();
        DeviceMemory[] buffers = new DeviceMemory[4]; // the input, then the chain's three
        try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_DELAY_RANK", "0", "JNCCL_HOST_DELAY_US", "3000");
             Communicator comm = communicator(CommunicatorOptions.defaults()); CudaStream other = CudaStream.create();
             DeviceMemory staged = upload(input); DeviceMemory scratch = upload(randomFloats())) {
            try {
                uploadRandom(buffers);
                DeviceTensor[] tensors = tensors(buffers);
                DeviceTensor[] chained = Arrays.copyOfRange(tensors, 1, tensors.length);
                try (CudaGraph graph = CudaGraph.capture(stream, () -> {
                    stream.copyAsync(tensors[0], chained[0]);
                    chain(comm, stream, chained);
                })) {
                    stream.copyAsync(staged.tensor(DType.FP32), tensors[0]);
                    comm.launch(graph, stream);
                    CudaGraph.capture(other, () -> comm.allReduce(scratch.tensor(DType.FP32), ReduceOp.MAX, other)).close();
                    comm.synchronize();
                    assertBits(input.toArray(ValueLayout.JAVA_FLOAT), download(buffers[3]), "the replay after synchronize");
                }
                assertFalse(comm.isAborted(), "aborted: " + comm.recentTransactions());
            } finally {
                stream.synchronize();
                comm.synchronize();
                closeAll(buffers);
            }
        }
    }

    private void uploadRandom(DeviceMemory[] memory) {
        for (int i = 0; i < memory.length; i++) {
            memory[i] = upload(randomFloats());
        }
    }

    private static void closeAll(DeviceMemory[]... arrays) {
        for (DeviceMemory[] memory : arrays) {
            for (DeviceMemory m : memory) {
                if (m != null) {
                    m.close();
                }
            }
        }
    }

    private static DeviceTensor[] tensors(DeviceMemory[] memory) {
        DeviceTensor[] tensors = new DeviceTensor[memory.length];
        for (int i = 0; i < memory.length; i++) {
            tensors[i] = memory[i].tensor(DType.FP32);
        }
        return tensors;
    }

    @Test
    void closeWithAnOpenGraphAndLaunchAfterCloseOrAbortAreRefused() {
        Communicator comm = communicator(CommunicatorOptions.defaults());
        try (DeviceMemory work = upload(randomFloats())) {
            DeviceTensor tensor = work.tensor(DType.FP32);
            CudaGraph graph = CudaGraph.capture(stream, () -> comm.allReduce(tensor, ReduceOp.SUM, stream));
            IllegalStateException close = assertThrows(IllegalStateException.class, comm::close);
            assertTrue(close.getMessage().startsWith("close: CUDA graph #" + graph.id()), close.getMessage());
            assertFalse(comm.isClosed());
            try (CudaGraph empty = CudaGraph.capture(stream, () -> { })) {
                IllegalArgumentException none = assertThrows(IllegalArgumentException.class,
                        () -> comm.launch(empty, stream));
                assertTrue(none.getMessage().contains("captured no transaction"), none.getMessage());
            }
            IllegalStateException inside = assertThrows(IllegalStateException.class,
                    () -> CudaGraph.capture(stream, comm::close));
            assertTrue(inside.getMessage().startsWith("close:"), inside.getMessage());
            comm.launch(graph, stream);
            graph.close();
            IllegalStateException closedGraph = assertThrows(IllegalStateException.class,
                    () -> comm.launch(graph, stream));
            assertEquals("launch: " + graph + " is closed", closedGraph.getMessage());
            comm.close(); // the graph is closed now
            assertTrue(comm.isClosed());
            IllegalStateException afterClose = assertThrows(IllegalStateException.class,
                    () -> comm.launch(graph, stream));
            assertTrue(afterClose.getMessage().startsWith("launch: communicator of rank 0 is closed"),
                    afterClose.getMessage());
        } finally {
            comm.close();
        }
        try (Communicator aborted = communicator(CommunicatorOptions.defaults());
             DeviceMemory work = upload(randomFloats())) {
            DeviceTensor tensor = work.tensor(DType.FP32);
            try (CudaGraph graph = CudaGraph.capture(stream, () -> aborted.allReduce(tensor, ReduceOp.SUM, stream))) {
                aborted.abort("test abort");
                CommunicatorAbortedException e = assertThrows(CommunicatorAbortedException.class,
                        () -> aborted.launch(graph, stream));
                assertTrue(e.getMessage().startsWith("launch:") && e.getMessage().contains("test abort"),
                        e.getMessage());
            }
        }
    }

    /**
     * A replay's flight recorder slot refers to the graph's captured commands instead of copying
     * them: the dump names each of them for every replay, and a transaction that later takes the
     * same slot (a recorder of 2 slots, replays and transactions alternating) lists only its own.
     */
    @Test
    void theFlightRecorderListsAReplaysCapturedCommandsAndNothingStaleInItsSlotLater() {
        CommunicatorOptions options = CommunicatorOptions.defaults().withFlightRecorderSize(2);
        try (Communicator comm = communicator(options); DeviceMemory work = upload(randomFloats())) {
            DeviceTensor tensor = work.tensor(DType.FP32);
            try (CudaGraph graph = CudaGraph.capture(stream, () -> {
                comm.allReduce(tensor, ReduceOp.MAX, stream);
                comm.broadcast(tensor, 0, stream);
            })) {
                for (int round = 0; round < 3; round++) {
                    comm.launch(graph, stream);
                    comm.allGather(tensor.shard(comm.rank(), comm.worldSize()), tensor, stream);
                    String dump = comm.recentTransactions();
                    String[] entries = dump.split("\n    #");
                    assertEquals(3, entries.length, dump);
                    String replay = entries[1];
                    String transaction = entries[2];
                    assertTrue(replay.contains("replay of graph #" + graph.id()) && replay.contains("2 command(s)")
                            && replay.contains("allReduce MAX") && replay.contains("broadcast"), dump);
                    assertTrue(transaction.contains("1 command(s)") && transaction.contains("allGather")
                            && !transaction.contains("allReduce") && !transaction.contains("broadcast"), dump);
                }
                comm.synchronize();
            }
        }
    }

    @Test
    void aReplayThatNeverCompletesIsAbortedByTheWatchdogWithADumpNamingIt() throws InterruptedException {
        Backend backend = JncclRuntime.query().backend();
        assumeTrue(backend == Backend.HOST, "needs the host emulation's fault injection (backend is " + backend + ")");
        CommunicatorOptions options = CommunicatorOptions.defaults().withWatchdog(Duration.ofMillis(500))
                .withWatchdogInterval(Duration.ofMillis(20));
        // Two captured all-reduces (counted when they run): the first replay runs operations 1 and 2,
        // the second hangs on 3.
        try (NativeEnv _ = NativeEnv.set("JNCCL_HOST_FAULT", "hang", "JNCCL_HOST_FAULT_RANK", "0",
                "JNCCL_HOST_FAULT_AT", "3");
             Communicator comm = communicator(options); DeviceMemory work = upload(randomFloats())) {
            DeviceTensor tensor = work.tensor(DType.FP32);
            try (CudaGraph graph = CudaGraph.capture(stream, () -> {
                comm.allReduce(tensor, ReduceOp.SUM, stream);
                comm.allReduce(tensor, ReduceOp.MAX, stream);
            })) {
                comm.launch(graph, stream);
                comm.synchronize();
                assertFalse(comm.isAborted(), "the first replay completes: " + comm.recentTransactions());
                comm.launch(graph, stream);
                long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
                while (!comm.isAborted() && System.nanoTime() < deadline) {
                    Thread.sleep(20);
                }
                assertTrue(comm.isAborted(), "the watchdog did not abort: " + comm.recentTransactions());
                String reason = comm.abortReason();
                // The first replay (#3) is named when no probe covered it alone before the hang: the
                // oldest replay not known complete.
                assertTrue(reason.matches("(?s).*watchdog: replay #[34] of graph #" + graph.id() + " not complete.*"),
                        reason);
                String dump = comm.recentTransactions();
                assertTrue(dump.contains("replay of graph #" + graph.id() + ", NOT COMPLETED")
                        && dump.contains("captured into graph #" + graph.id()), dump);
                assertThrows(CommunicatorAbortedException.class, () -> comm.launch(graph, stream));
            }
        }
    }

    @Test
    void unjoinedCommsStreamFailsTheCaptureWithCudasError() {
        try (Communicator comm = communicator(CommunicatorOptions.defaults()); CudaEvent ready = CudaEvent.create();
             CudaEvent signal = CudaEvent.create(); DeviceMemory work = upload(randomFloats());
             DeviceMemory out = upload(randomFloats())) {
            DeviceTensor tensor = work.tensor(DType.FP32);
            DeviceTensor result = out.tensor(DType.FP32);
            CudaException e = assertThrows(CudaException.class, () -> CudaGraph.capture(stream, () -> {
                ready.record(stream);
                // Out of place, so that the comms stream holds work: one rank's in-place sum enqueues
                // nothing in NCCL, and CUDA then finds nothing unjoined (seen on the H200).
                comm.begin(ready).allReduce(tensor, result, ReduceOp.SUM).execute(signal); // never waited for
            }));
            assertTrue(e.getMessage().contains("cudaStreamEndCapture"), e.getMessage());
            assertEquals(904, e.code(), e.getMessage()); // cudaErrorStreamCaptureUnjoined
            assertFalse(stream.isCapturing());
            // The communicator and the stream go on working eagerly.
            comm.begin(stream).allReduce(tensor, ReduceOp.SUM).execute(signal);
            stream.waitFor(signal);
            stream.synchronize();
            assertFalse(comm.isAborted());
        }
    }

    @Test
    void waitsInsideACaptureAreRefusedAndTheStreamRecovers() {
        try (Communicator comm = communicator(CommunicatorOptions.defaults()); CudaEvent event = CudaEvent.create()) {
            assertRefused("synchronize", () -> stream.synchronize());
            assertRefused("isIdle", () -> stream.isIdle());
            assertRefused("isComplete", () -> event.isComplete());
            assertRefused("synchronize", () -> event.synchronize());
            assertRefused("synchronize", Cuda::synchronize);
            assertRefused("synchronize", comm::synchronize);
            assertRefused("await", () -> comm.await(event));
            // An event recorded in a capture cannot be waited for by another thread either.
            try (CudaGraph graph = CudaGraph.capture(stream, () -> {
                event.record(stream);
                AtomicReference<Throwable> failure = new AtomicReference<>();
                Thread other = Thread.ofPlatform().start(() -> {
                    try {
                        assertRefused0("isComplete", event::isComplete);
                    } catch (Throwable t) {
                        failure.set(t);
                    }
                });
                join(other);
                if (failure.get() != null) {
                    throw new AssertionError("from another thread", failure.get());
                }
            })) {
                graph.launch(stream);
                stream.synchronize();
            }
            // After the capture, a launch does not record the event for the host (CUDA answers its
            // query with invalid argument): refused with the reason until it is recorded again outside.
            IllegalStateException ended = assertThrows(IllegalStateException.class, event::isComplete);
            assertTrue(ended.getMessage().contains("recorded inside a CUDA graph capture, which has ended"),
                    ended.getMessage());
            assertThrows(IllegalStateException.class, event::synchronize);
            assertThrows(IllegalStateException.class, () -> comm.await(event));
            event.record(stream);
            event.synchronize();
            assertTrue(event.isComplete());
            comm.synchronize();
            assertFalse(comm.isAborted());
        }
    }

    /** {@code call} inside a capture throws IllegalStateException naming it; the capture ends cleanly. */
    private void assertRefused(String operation, Runnable call) {
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> CudaGraph.capture(stream, call));
        assertTrue(e.getMessage().startsWith(operation + ":") && e.getMessage().contains("CudaGraph.capture"),
                e.getMessage());
        assertFalse(stream.isCapturing(), "the capture was not ended");
        assertTrue(CudaGraph.currentCapture().isEmpty());
        stream.synchronize(); // usable again
    }

    private static void assertRefused0(String operation, Runnable call) {
        IllegalStateException e = assertThrows(IllegalStateException.class, call::run);
        assertTrue(e.getMessage().startsWith(operation + ":") && e.getMessage().contains("capture"), e.getMessage());
    }

    @Test
    void aThrowingBodyEndsTheCaptureAndPropagates() {
        IllegalArgumentException boom = new IllegalArgumentException("boom");
        try (DeviceMemory memory = upload(randomFloats()); DeviceMemory copy = DeviceMemory.allocate(memory.bytes())) {
            IllegalArgumentException thrown = assertThrows(IllegalArgumentException.class,
                    () -> CudaGraph.capture(stream, () -> {
                        stream.copyAsync(memory.tensor(DType.FP32), copy.tensor(DType.FP32));
                        assertTrue(CudaGraph.currentCapture().isPresent());
                        throw boom;
                    }));
            assertSame(boom, thrown);
            assertFalse(stream.isCapturing());
            assertTrue(CudaGraph.currentCapture().isEmpty());
            // The next capture on the same stream works and holds only its own work.
            try (CudaGraph graph = CudaGraph.capture(stream, () -> stream.copyAsync(memory.tensor(DType.FP32),
                    copy.tensor(DType.FP32)))) {
                graph.launch(stream);
                stream.synchronize();
                assertArrayEquals(download(memory), download(copy));
            }
        }
    }

    @Test
    void nestedCapturesAndCapturingStreamsAreRefused() {
        try (CudaStream other = CudaStream.create()) {
            IllegalStateException e = assertThrows(IllegalStateException.class,
                    () -> CudaGraph.capture(stream, () -> CudaGraph.capture(other, () -> { })));
            assertTrue(e.getMessage().contains("already capturing"), e.getMessage());
            try (CudaGraph graph = CudaGraph.capture(other, () -> { })) {
                IllegalStateException launch = assertThrows(IllegalStateException.class,
                        () -> CudaGraph.capture(stream, () -> graph.launch(stream)));
                assertTrue(launch.getMessage().startsWith("launch:"), launch.getMessage());
            }
        }
        assertThrows(NullPointerException.class, () -> CudaGraph.capture(null, () -> { }));
        assertThrows(NullPointerException.class, () -> CudaGraph.capture(stream, null));
    }

    @Test
    void launchAfterCloseSaysSo() {
        CudaGraph graph = CudaGraph.capture(stream, () -> { });
        CudaGraph second = CudaGraph.capture(stream, () -> { });
        assertNotEquals(graph.id(), second.id());
        assertEquals(0, graph.device());
        graph.launch(stream);
        graph.close();
        graph.close(); // idempotent
        second.close();
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> graph.launch(stream));
        assertEquals("launch: " + graph + " is closed", e.getMessage());
        assertTrue(graph.toString().contains("CudaGraph#" + graph.id()) && graph.toString().contains("closed"));
        stream.synchronize();
    }

    private static void sleepMillis(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError(e);
        }
    }

    private static void join(Thread thread) {
        try {
            thread.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError(e);
        }
    }
}
