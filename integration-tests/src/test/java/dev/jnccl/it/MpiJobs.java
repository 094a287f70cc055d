package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.File;
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
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * MPI jobs of {@link MpiRank} for the tests: {@code mpirun -np W java ... MpiRank SCENARIO SEED}
 * under Open MPI ({@code mpirun.openmpi}, {@code libmpi.so.40}) or MPICH ({@code mpirun.mpich},
 * {@code libmpich.so.12}), with the child JVMs on this JVM's class path; each rank's verdict line
 * is parsed and asserted. With {@code oneGpu} (real NCCL on one GPU) every process uses device 0
 * ({@code JNCCL_DEVICE=0}) and gets its own {@code NCCL_HOSTID}, so NCCL runs each as its own node.
 */
final class MpiJobs {
    /** The two MPI families, each with its launcher and the library its processes must load. */
    enum Launcher {
        OPEN_MPI("mpirun.openmpi", "libmpi.so.40"),
        MPICH("mpirun.mpich", "libmpich.so.12");

        final String command;
        final String library;

        Launcher(String command, String library) {
            this.command = command;
            this.library = library;
        }

        /** The launcher on PATH (Open MPI: also a plain {@code mpirun} next to {@code ompi_info}), or null. */
        Path find() {
            Path found = onPath(command);
            if (found == null && this == OPEN_MPI && onPath("ompi_info") != null) {
                found = onPath("mpirun");
            }
            return found;
        }

        private static Path onPath(String name) {
            for (String dir : System.getenv().getOrDefault("PATH", "").split(File.pathSeparator)) {
                Path candidate = Path.of(dir, name);
                if (!dir.isEmpty() && Files.isExecutable(candidate)) {
                    return candidate;
                }
            }
            return null;
        }
    }

    private final Launcher launcher;
    private final String backend;
    private final boolean oneGpu;
    private final Map<String, String> environment;
    /** Whether the launcher lets the other ranks run on when one dies (they must end the job themselves). */
    private final boolean survivorsRunOn;

    MpiJobs(Launcher launcher, String backend, boolean oneGpu, Map<String, String> environment) {
        this(launcher, backend, oneGpu, environment, false);
    }

    private MpiJobs(Launcher launcher, String backend, boolean oneGpu, Map<String, String> environment,
                    boolean survivorsRunOn) {
        this.launcher = launcher;
        this.backend = backend;
        this.oneGpu = oneGpu;
        this.environment = environment;
        this.survivorsRunOn = survivorsRunOn;
    }

    /**
     * These jobs with a launcher that does not kill the other ranks when one dies (Open MPI
     * {@code --enable-recovery}, MPICH {@code -disable-auto-cleanup}; Slurm's {@code srun} by
     * default), so that what the survivors say about the dead rank can be seen.
     */
    MpiJobs survivorsRunOn() {
        return new MpiJobs(launcher, backend, oneGpu, environment, true);
    }

    /** Skips the test, with the reason, when the launcher is not installed (scripts/test.sh installs both). */
    Path requireLauncher() {
        Path path = launcher.find();
        assumeTrue(path != null, launcher.command + " is not on PATH: install openmpi-bin libopenmpi-dev mpich"
                + " libmpich-dev (scripts/test.sh does)");
        return path;
    }

    /** Starts {@code mpirun -np world} of {@code scenario}; extra JVM options go before the main class. */
    Job start(String scenario, int world, String... jvmOptions) throws IOException {
        return start(MpiRank.class, scenario, world, jvmOptions);
    }

    /** Starts {@code mpirun -np world} of {@code main}'s {@code scenario}; extra JVM options go before the main class. */
    Job start(Class<?> main, String scenario, int world, String... jvmOptions) throws IOException {
        Path mpirun = requireLauncher();
        Path directory = Files.createTempDirectory("jnccl-mpi-");
        Path log = directory.resolve("job.log");
        List<String> command = new ArrayList<>();
        command.add(mpirun.toString());
        command.addAll(List.of("-np", Integer.toString(world)));
        Map<String, String> env = new TreeMap<>(environment);
        // -Djnccl.it.mpi.library.OPEN_MPI=/opt/ompi/lib/libmpi.so.40: an MPI outside the linker's path.
        env.put("JNCCL_MPI_LIBRARY", System.getProperty("jnccl.it.mpi.library." + launcher.name(), launcher.library));
        if (oneGpu) {
            env.put("JNCCL_DEVICE", "0");
        }
        if (launcher == Launcher.OPEN_MPI) {
            // As root Open MPI refuses to start without the flag; more processes than cores need --oversubscribe.
            command.addAll(List.of("--allow-run-as-root", "--oversubscribe"));
            if (survivorsRunOn) {
                command.add("--enable-recovery");
            }
            env.keySet().forEach(name -> command.addAll(List.of("-x", name)));
        } else {
            if (survivorsRunOn) {
                command.add("-disable-auto-cleanup");
            }
            env.keySet().forEach(name -> command.addAll(List.of("-genv", name, env.get(name))));
        }
        if (oneGpu) {
            // Each process its own NCCL "node" (rank from the launcher's environment).
            String rankVariable = launcher == Launcher.OPEN_MPI ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK";
            command.addAll(List.of("sh", "-c", "NCCL_HOSTID=r$" + rankVariable + " exec \"$0\" \"$@\""));
        }
        List<String> jvm = new ArrayList<>(List.of("--enable-native-access=ALL-UNNAMED", "-Djnccl.backend=" + backend));
        jvm.addAll(List.of(jvmOptions));
        command.addAll(ChildJvm.command(jvm, main, scenario, Long.toString(new SplittableRandom().nextLong())));
        ProcessBuilder builder = ChildJvm.builder(command, log);
        builder.environment().putAll(env);
        return new Job(builder.start(), directory, log, launcher + " -np " + world + " " + scenario);
    }

    /**
     * Runs {@code scenario} on {@code world} ranks and asserts exit 0 and a PASS verdict from every rank.
     *
     * @return the job's output
     */
    String runAndPass(String scenario, int world, Duration timeout) throws Exception {
        try (Job job = start(scenario, world)) {
            int exit = job.awaitExit(timeout);
            String output = job.output();
            assertEquals(0, exit, job.name + ": exit code\n" + output);
            Map<Integer, String> verdicts = job.verdicts();
            for (int r = 0; r < world; r++) {
                String verdict = verdicts.get(r);
                assertTrue(verdict != null, job.name + ": no verdict from rank " + r + "\n" + output);
                assertTrue(verdict.contains(" world=" + world + " PASS "), job.name + ": rank " + r + ": " + verdict
                        + "\n" + output);
                assertTrue(verdict.contains("abi=" + launcher.name()), job.name + ": rank " + r + " loaded another MPI: "
                        + verdict);
            }
            assertEquals(world, verdicts.size(), job.name + ": verdicts " + verdicts.keySet() + "\n" + output);
            return output;
        }
    }

    /** One mpirun and its log; closing kills what is left (by PID) and deletes the log. */
    static final class Job implements AutoCloseable {
        final Process process;
        final String name;
        private final Path directory;
        private final Path log;

        Job(Process process, Path directory, Path log, String name) {
            this.process = process;
            this.directory = directory;
            this.log = log;
            this.name = name;
        }

        String output() {
            try {
                return Files.readString(log, StandardCharsets.UTF_8);
            } catch (IOException e) {
                return "(no output: " + e + ")";
            }
        }

        /** The exit code of mpirun; fails when it did not end within {@code timeout}. */
        int awaitExit(Duration timeout) throws InterruptedException {
            if (!process.waitFor(timeout.toMillis(), TimeUnit.MILLISECONDS)) {
                fail(name + ": the job did not end within " + timeout.toSeconds() + " s\n" + output());
            }
            return process.exitValue();
        }

        /** The line {@code text} first matched, waiting for it while the job runs. */
        Matcher awaitLine(String regex, Duration timeout) throws InterruptedException {
            Pattern pattern = Pattern.compile(regex);
            long deadline = System.nanoTime() + timeout.toNanos();
            while (true) {
                Matcher m = pattern.matcher(output());
                if (m.find()) {
                    return m;
                }
                if (System.nanoTime() > deadline || !process.isAlive()) {
                    fail(name + ": no line matching " + regex + "\n" + output());
                }
                Thread.sleep(20);
            }
        }

        /** Rank -> verdict line. */
        Map<Integer, String> verdicts() {
            Map<Integer, String> verdicts = new TreeMap<>();
            Matcher m = Pattern.compile("(?m)^VERDICT rank=(\\d+) .*$").matcher(output());
            while (m.find()) {
                verdicts.put(Integer.parseInt(m.group(1)), m.group());
            }
            return verdicts;
        }

        /** The PIDs the ranks printed. */
        List<Long> pids() {
            List<Long> pids = new ArrayList<>();
            Matcher m = Pattern.compile("(?m)^PID (\\d+)$").matcher(output());
            while (m.find()) {
                pids.add(Long.parseLong(m.group(1)));
            }
            return pids;
        }

        /** Asserts that no rank process is left within {@code timeout} after the job ended. */
        void assertNoRankLeft(Duration timeout) throws InterruptedException {
            long deadline = System.nanoTime() + timeout.toNanos();
            for (long pid : pids()) {
                while (ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false)) {
                    if (System.nanoTime() > deadline) {
                        fail(name + ": rank process " + pid + " still alive " + timeout.toSeconds()
                                + " s after the job ended\n" + output());
                    }
                    Thread.sleep(20);
                }
            }
        }

        @Override
        public void close() throws IOException {
            for (long pid : pids()) {
                ProcessHandle.of(pid).ifPresent(ProcessHandle::destroyForcibly);
            }
            process.descendants().forEach(ProcessHandle::destroyForcibly);
            process.destroyForcibly();
            try {
                process.waitFor(30, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            Files.deleteIfExists(log);
            Files.deleteIfExists(directory);
        }
    }
}
