package dev.jnccl.bindings;

import static dev.jnccl.bindings.EmulationSupport.cuda;
import static dev.jnccl.bindings.EmulationSupport.nccl;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.testsupport.ChildJvm;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Ranks as separate processes: child JVMs on the host emulation that meet only through the unique
 * id (passed as hex on the command line), run collectives across processes through the POSIX
 * shared-memory rendezvous, and check their own results; the last rank to leave removes the
 * segments.
 */
@Timeout(value = 150, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class EmulationProcessWorldTest {

    @BeforeAll
    static void hostOnly() {
        EmulationSupport.assumeHost();
    }

    @Test
    void threeProcessesReduceGatherAndExchangeThroughTheUniqueIdAlone() throws Exception {
        int n = 3;
        String id;
        try (Arena arena = Arena.ofConfined()) {
            id = EmulationSupport.hex(EmulationSupport.newUniqueId(arena));
        }
        Set<String> shmBefore = EmulationSupport.shmSegments();
        long seed = 0xC0FFEEL;
        List<Process> processes = new ArrayList<>();
        List<Path> logs = new ArrayList<>();
        try {
            for (int rank = 0; rank < n; rank++) {
                Path log = Files.createTempFile("jnccl-rank" + rank + "-", ".log");
                logs.add(log);
                processes.add(start(log, EmulationRankProcess.class, id, Integer.toString(n), Integer.toString(rank),
                        Long.toString(seed)));
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            for (int rank = 0; rank < n; rank++) {
                long left = Math.max(1, deadline - System.nanoTime());
                boolean done = processes.get(rank).waitFor(left, TimeUnit.NANOSECONDS);
                assertTrue(done, "rank process " + rank + " did not finish in time:\n" + outputs(logs));
            }
            for (int rank = 0; rank < n; rank++) {
                int code = processes.get(rank).exitValue();
                int r = rank;
                assertEquals(0, code, () -> "rank process " + r + " exited with " + code + ":\n" + outputs(logs));
            }
            String all = outputs(logs);
            for (int rank = 0; rank < n; rank++) {
                assertTrue(all.contains("rank " + rank + " of " + n), "no report from rank " + rank + ":\n" + all);
            }
            // Every process has left: no segment of theirs may stay in /dev/shm.
            Set<String> left = new TreeSet<>(EmulationSupport.shmSegments());
            left.removeAll(shmBefore);
            assertTrue(left.isEmpty(), "/dev/shm segments left by the rank processes: " + left);
        } finally {
            for (Process process : processes) {
                process.destroyForcibly();
            }
            for (Path log : logs) {
                Files.deleteIfExists(log);
            }
        }
    }

    @Test
    void aPeerProcessThatDiesIsARemoteErrorForTheOthers() throws Exception {
        // Rank 0 is a thread of this JVM, rank 1 a child JVM that joins and then halts. Rank 0's next
        // all-reduce must end with ncclRemoteError instead of waiting forever.
        String id;
        try (Arena arena = Arena.ofConfined()) {
            id = EmulationSupport.hex(EmulationSupport.newUniqueId(arena));
        }
        Set<String> shmBefore = EmulationSupport.shmSegments();
        Path log = Files.createTempFile("jnccl-dying-rank-", ".log");
        Process child = start(log, EmulationRankProcess.class, id, "2", "1", "1", "die-after-init");
        MemorySegment comm = null;
        MemorySegment stream = null;
        MemorySegment buffer = null;
        try {
            comm = EmulationSupport.withinTime(Duration.ofSeconds(60), "ncclCommInitRank with a child process", () -> {
                try (Arena arena = Arena.ofConfined()) {
                    return EmulationSupport.initRank(EmulationSupport.uniqueIdFromHex(id, arena), 2, 0, 0);
                }
            });
            assertTrue(child.waitFor(30, TimeUnit.SECONDS), "the child did not die");
            cuda(CudaRuntime.cudaSetDevice(0), "cudaSetDevice");
            stream = EmulationSupport.newStream();
            buffer = EmulationSupport.deviceMalloc(4 * 1024);
            nccl(Nccl.ncclAllReduce(buffer, buffer, 1024, Nccl.ncclFloat32(), Nccl.ncclSum(), comm, stream), "ncclAllReduce");
            MemorySegment c = comm;
            boolean remote = EmulationSupport.await(Duration.ofSeconds(10),
                    () -> EmulationSupport.asyncError(c) == Nccl.ncclRemoteError());
            assertTrue(remote, "async error with a dead peer process: " + EmulationSupport.ncclText(EmulationSupport.asyncError(c))
                    + "\n" + Files.readString(log));
            String text = EmulationSupport.lastError(comm);
            assertTrue(text.contains("rank 1") && text.contains("exited"), "error text: " + text);
            MemorySegment s = stream;
            EmulationSupport.withinTime(Duration.ofSeconds(10), "cudaStreamSynchronize", () -> CudaRuntime.cudaStreamSynchronize(s));
        } finally {
            child.destroyForcibly();
            if (comm != null) {
                MemorySegment c = comm;
                EmulationSupport.withinTime(Duration.ofSeconds(10), "ncclCommAbort", () -> Nccl.ncclCommAbort(c));
            }
            if (stream != null) {
                cuda(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
            }
            if (buffer != null) {
                EmulationSupport.free(buffer);
            }
            Files.deleteIfExists(log);
        }
        Set<String> left = new TreeSet<>(EmulationSupport.shmSegments());
        left.removeAll(shmBefore);
        assertTrue(left.isEmpty(), "/dev/shm segments left: " + left);
    }

    /** A child JVM on the host emulation, its output (stdout and stderr) going to log. */
    static Process start(Path log, Class<?> main, String... args) throws IOException {
        List<String> command = ChildJvm.command(List.of("--enable-native-access=ALL-UNNAMED", "-Djnccl.backend=host",
                "-Xss2m", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-Djnccl.test.log.level=WARN"), main, args);
        ProcessBuilder builder = ChildJvm.builder(command, log);
        // The child reads no fault or delay variables that this JVM may have set through libc.
        builder.environment().keySet().removeIf(name -> name.startsWith("JNCCL_HOST_"));
        return builder.start();
    }

    private static String outputs(List<Path> logs) {
        StringBuilder text = new StringBuilder();
        for (int i = 0; i < logs.size(); i++) {
            try {
                text.append("--- rank ").append(i).append(" ---\n")
                        .append(Files.readString(logs.get(i), StandardCharsets.UTF_8));
            } catch (IOException e) {
                text.append("(unreadable: ").append(e).append(")\n");
            }
        }
        return text.toString();
    }
}
