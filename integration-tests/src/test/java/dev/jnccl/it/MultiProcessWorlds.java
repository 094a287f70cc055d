package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import dev.jnccl.CommunicatorMode;
import dev.jnccl.testsupport.ChildJvm;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The multi-process lifecycle checks (bounded init and close, watchdog, failures), for a backend: W child JVMs ({@link ProcessRank}),
 * one per rank, all on device 0, meeting through a unique-id file. The host emulation runs them in
 * CI ({@link MultiProcessLifecycleTest}); real NCCL on one GPU ({@link GpuMultiProcessLifecycleTest})
 * gives every process its own {@code NCCL_HOSTID}, so NCCL treats each as its own node.
 */
final class MultiProcessWorlds {
    private static final String BOTH = CommunicatorMode.BLOCKING_SPLIT + "," + CommunicatorMode.NON_BLOCKING;

    private final String backend;
    private final Map<String, String> extraEnvironment;

    MultiProcessWorlds(String backend, Map<String, String> extraEnvironment) {
        this.backend = backend;
        this.extraEnvironment = extraEnvironment;
    }

    /** Every transaction command and convenience operation, element by element, in both modes. */
    void everyOperationInBothModes(int world) throws Exception {
        try (Ranks ranks = start("ops", world, world, BOTH)) {
            ranks.awaitAll(Duration.ofSeconds(300));
            for (int r = 0; r < world; r++) {
                ranks.assertExit(r, 0);
                for (CommunicatorMode mode : CommunicatorMode.values()) {
                    long close = ranks.number(r, "OK mode=" + mode + " close_ms=(\\d+)");
                    assertTrue(close < ProcessRank.CLOSE_TIMEOUT.toMillis() + 2000, "rank " + r + " close took "
                            + close + " ms\n" + ranks.output(r));
                }
            }
        }
    }

    /** Ranks 0..W-2 start, rank W-1 never does: each init ends at its deadline, in both modes. */
    void rankThatNeverJoins(int world) throws Exception {
        try (Ranks ranks = start("never-joined", world, world - 1, BOTH)) {
            ranks.awaitAll(Duration.ofSeconds(120));
            long deadline = ProcessRank.INIT_TIMEOUT_NEVER_JOINED.toMillis();
            for (CommunicatorMode mode : CommunicatorMode.values()) {
                boolean someRankReachedTheDeadline = false;
                for (int r = 0; r < world - 1; r++) {
                    ranks.assertExit(r, 0);
                    String output = ranks.output(r);
                    if (output.contains("INIT_ABORTED mode=" + mode + " ")) {
                        long ms = ranks.number(r, "INIT_ABORTED mode=" + mode + " ms=(\\d+)");
                        assertTrue(ms >= deadline - 100 && ms < deadline + 10_000, "rank " + r + ", " + mode
                                + ": init ended after " + ms + " ms, deadline " + deadline + " ms\n" + output);
                        someRankReachedTheDeadline = true;
                    } else {
                        // Real NCCL: a peer that gave up at its deadline ends this rank's init too.
                        long ms = ranks.number(r, "INIT_PEER_GAVE_UP mode=" + mode + " ms=(\\d+)");
                        assertTrue(ms < deadline + 10_000, "rank " + r + ", " + mode + ": init ended after " + ms
                                + " ms, deadline " + deadline + " ms\n" + output);
                    }
                }
                assertTrue(someRankReachedTheDeadline, mode + ": no rank's init ended at its own deadline");
            }
        }
    }

    /**
     * Rank W-1 is SIGKILLed mid-run: every other rank's communicator is aborted within the watchdog
     * timeout (plus slack), by the watchdog or by an enqueue that meets the dead peer; close is bounded.
     */
    void killedRank(int world, CommunicatorMode mode) throws Exception {
        try (Ranks ranks = start("killed", world, world, mode.name())) {
            int victim = world - 1;
            ranks.awaitOutput(victim, "RUNNING", Duration.ofSeconds(180));
            long killedAt = System.currentTimeMillis();
            ranks.kill(victim);
            ranks.awaitAll(Duration.ofSeconds(120));
            long bound = ProcessRank.WATCHDOG_TIMEOUT.toMillis() + 5000;
            for (int r = 0; r < victim; r++) {
                ranks.assertExit(r, 0);
                long abortedAt = ranks.number(r, "ABORTED epoch_ms=(\\d+)");
                assertTrue(abortedAt - killedAt < bound, "rank " + r + " aborted " + (abortedAt - killedAt)
                        + " ms after the kill (watchdog timeout " + ProcessRank.WATCHDOG_TIMEOUT.toMillis() + " ms)\n"
                        + ranks.output(r));
                // The watchdog, or (host emulation) the enqueue that met the dead peer.
                String output = ranks.output(r);
                assertTrue(output.contains("reason=watchdog") || output.contains("remote process exited"),
                        "rank " + r + ": aborted for another reason\n" + output);
                long close = ranks.number(r, "CLOSED close_ms=(\\d+)");
                assertTrue(close < ProcessRank.CLOSE_TIMEOUT.toMillis() + 2000, "rank " + r + " close took " + close
                        + " ms");
            }
        }
    }

    private Ranks start(String scenario, int world, int started, String modes) throws IOException {
        Path directory = Files.createTempDirectory("jnccl-ranks-");
        long seed = new SplittableRandom().nextLong();
        Ranks ranks = new Ranks(directory);
        for (int rank = 0; rank < started; rank++) {
            List<String> command = ChildJvm.command(List.of("--enable-native-access=ALL-UNNAMED",
                    "-Djnccl.backend=" + backend), ProcessRank.class, scenario, directory.resolve("id").toString(),
                    Integer.toString(world), Integer.toString(rank), "0", Long.toString(seed), modes);
            Path log = directory.resolve("rank" + rank + ".log");
            ProcessBuilder builder = ChildJvm.builder(command, log);
            builder.environment().putAll(extraEnvironment);
            builder.environment().put("NCCL_HOSTID", "r" + rank); // real NCCL: each process its own "node"
            ranks.add(builder.start(), log);
        }
        return ranks;
    }

    /** The child processes of one world; closing kills what is left and deletes the logs. */
    static final class Ranks implements AutoCloseable {
        private final Path directory;
        private final List<Process> processes = new ArrayList<>();
        private final List<Path> logs = new ArrayList<>();

        Ranks(Path directory) {
            this.directory = directory;
        }

        void add(Process process, Path log) {
            processes.add(process);
            logs.add(log);
        }

        String output(int rank) {
            try {
                return Files.readString(logs.get(rank), StandardCharsets.UTF_8);
            } catch (IOException e) {
                return "(no output: " + e + ")";
            }
        }

        void awaitAll(Duration timeout) throws InterruptedException {
            long deadline = System.nanoTime() + timeout.toNanos();
            for (int r = 0; r < processes.size(); r++) {
                long left = deadline - System.nanoTime();
                if (!processes.get(r).waitFor(Math.max(left, 0), TimeUnit.NANOSECONDS)) {
                    fail("rank " + r + " did not finish in " + timeout.toSeconds() + " s\n" + output(r));
                }
            }
        }

        void awaitOutput(int rank, String text, Duration timeout) throws InterruptedException {
            long deadline = System.nanoTime() + timeout.toNanos();
            while (!output(rank).contains(text)) {
                if (System.nanoTime() > deadline || !processes.get(rank).isAlive() && !output(rank).contains(text)) {
                    fail("rank " + rank + " never printed " + text + "\n" + output(rank));
                }
                Thread.sleep(20);
            }
        }

        void kill(int rank) throws InterruptedException {
            processes.get(rank).destroyForcibly(); // SIGKILL
            processes.get(rank).waitFor(30, TimeUnit.SECONDS);
        }

        void assertExit(int rank, int expected) {
            assertEquals(expected, processes.get(rank).exitValue(), "exit code of rank " + rank + "\n" + output(rank));
        }

        long number(int rank, String regex) {
            Matcher m = Pattern.compile(regex).matcher(output(rank));
            if (!m.find()) {
                fail("rank " + rank + ": no line matching " + regex + "\n" + output(rank));
            }
            return Long.parseLong(m.group(1));
        }

        @Override
        public void close() throws IOException {
            for (Process process : processes) {
                if (process.isAlive()) {
                    process.destroyForcibly();
                }
            }
            for (Process process : processes) {
                try {
                    process.waitFor(30, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
            try (var files = Files.list(directory)) {
                for (Path file : files.toList()) {
                    Files.deleteIfExists(file);
                }
            }
            Files.deleteIfExists(directory);
        }
    }
}
