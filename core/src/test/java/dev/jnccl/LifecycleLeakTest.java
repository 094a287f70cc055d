package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashSet;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * Repeated create / use / close of communicators (with the watchdog on, so its thread is started
 * and stopped every time) leaves no thread, file descriptor or shared-memory segment behind.
 */
class LifecycleLeakTest {

    private static long count(Path directory, String prefix) throws IOException {
        try (Stream<Path> entries = Files.list(directory)) {
            return entries.filter(p -> p.getFileName().toString().startsWith(prefix)).count();
        }
    }

    /** The names in {@code directory} that start with {@code prefix}. */
    private static Set<String> names(Path directory, String prefix) throws IOException {
        try (Stream<Path> entries = Files.list(directory)) {
            return entries.map(p -> p.getFileName().toString()).filter(n -> n.startsWith(prefix))
                    .collect(Collectors.toSet());
        }
    }

    private static long jncclThreads() {
        return Thread.getAllStackTraces().keySet().stream().filter(t -> t.getName().startsWith("jnccl-")).count();
    }

    @Test
    void createUseCloseCyclesLeakNothing() throws Throwable {
        assumeTrue(JncclRuntime.query().backend() == Backend.HOST,
                "counts the host emulation's threads and /dev/shm segments");
        CommunicatorOptions options = CommunicatorOptions.defaults().withWatchdog(Duration.ofSeconds(30))
                .withWatchdogInterval(Duration.ofMillis(5));
        Runnable cycle = () -> {
            try (Communicator comm = Communicator.single(0, options); CudaStream stream = CudaStream.create();
                 DeviceMemory memory = DeviceMemory.allocate(DType.FP32, 64); CudaEvent signal = CudaEvent.create()) {
                try (Transaction tx = comm.begin(stream)) {
                    tx.reduceScatter(memory.tensor(DType.FP32));
                    tx.execute(signal);
                }
                comm.await(signal);
            }
        };
        for (int i = 0; i < 20; i++) {
            cycle.run(); // warm up: the JVM's own threads (JIT, GC) settle
        }
        long threadsBefore = count(Path.of("/proc/self/task"), "");
        long fdsBefore = count(Path.of("/proc/self/fd"), "");
        // By name, not by count: another process (a parallel build) may add or remove its own segments.
        Set<String> shmBefore = names(Path.of("/dev/shm"), "jnccl-");
        for (int i = 0; i < 300; i++) {
            cycle.run();
        }
        // Two-rank cycles: rendezvous through a shared-memory segment each time.
        for (int i = 0; i < 50; i++) {
            LocalRanks.rethrowAny(LocalRanks.run(2, options, comm -> {
                comm.barrier();
                return null;
            }));
        }
        assertEquals(0, jncclThreads(), "a jnccl thread (watchdog) survived close()");
        // The JVM may start a compiler or GC thread meanwhile; jnccl's own would grow by hundreds.
        long threadsAfter = count(Path.of("/proc/self/task"), "");
        assertTrue(threadsAfter <= threadsBefore + 4, "threads " + threadsBefore + " -> " + threadsAfter);
        assertEquals(fdsBefore, count(Path.of("/proc/self/fd"), ""), "file descriptors leaked");
        Set<String> shmLeft = new HashSet<>(names(Path.of("/dev/shm"), "jnccl-"));
        shmLeft.removeAll(shmBefore);
        assertTrue(shmLeft.isEmpty(), "shared-memory segments leaked: " + shmLeft);
    }
}
