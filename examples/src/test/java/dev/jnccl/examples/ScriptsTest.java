package dev.jnccl.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The argument handling of the user's commands (scripts/bundle.sh, scripts/bench.sh and the
 * bundle's launchers), run as a user runs them, from a folder of their own. Nothing is built: the
 * bundle's OUT is checked before any build, and the rest runs with DRY_RUN=1, which prints the
 * folder the program would run in and its command line instead of running it.
 */
class ScriptsTest {
    private static final Path ROOT = repositoryRoot();
    private final SplittableRandom random = new SplittableRandom();

    @TempDir
    Path caller;

    @BeforeEach
    void realPath() throws IOException {
        // The scripts see the folder without symbolic links (getcwd), so the expectations do too.
        caller = caller.toRealPath();
    }

    /** Exit status, standard output and standard error of one command. */
    private record Run(int exit, String out, String err) {
        List<String> lines() {
            return out.lines().toList();
        }
    }

    @Test
    void bundleAnswersHelpWithItsUsageAndBuildsNothing() throws Exception {
        Run help = run(Map.of(), List.of(ROOT.resolve("scripts/bundle.sh").toString(), "--help"));
        assertEquals(0, help.exit(), help.err());
        assertTrue(help.out().startsWith("Builds OUT: a folder that runs jnccl's example"), help.out());
        assertTrue(help.out().contains("scripts/bundle.sh [--dry-run] OUT"), help.out());
        assertFalse(help.err().contains("building"), help.err());
    }

    @Test
    void aBuildIsNeededOnlyWhenASourceIsNewerThanTheStampOrWhenForced() throws Exception {
        // build_needed of scripts/lib/build.sh, in a layout of its own: a pom, a module's source, a stamp.
        Files.createDirectories(caller.resolve("mod/src"));
        Files.writeString(caller.resolve("pom.xml"), "<project/>");
        Path source = Files.writeString(caller.resolve("mod/src/A.java"), "class A {}");
        Path stamp = caller.resolve("mod/target/stamp");
        String check = ". " + ROOT.resolve("scripts/lib/build.sh") + "; cd " + caller
                + "; if build_needed mod/target/stamp; then echo BUILD; else echo UP_TO_DATE; fi";
        assertEquals("BUILD", run(Map.of(), List.of("bash", "-c", check)).out().strip(), "no stamp yet");
        Files.createDirectories(stamp.getParent());
        Files.writeString(stamp, "");
        java.nio.file.attribute.FileTime past = java.nio.file.attribute.FileTime.fromMillis(
                System.currentTimeMillis() - 60_000 - random.nextInt(60_000));
        Files.setLastModifiedTime(source, past);
        Files.setLastModifiedTime(caller.resolve("pom.xml"), past);
        assertEquals("UP_TO_DATE", run(Map.of(), List.of("bash", "-c", check)).out().strip());
        assertEquals("BUILD", run(Map.of("FORCE_BUILD", "1"), List.of("bash", "-c", check)).out().strip());
        Files.setLastModifiedTime(source, java.nio.file.attribute.FileTime.fromMillis(System.currentTimeMillis() + 1000));
        assertEquals("BUILD", run(Map.of(), List.of("bash", "-c", check)).out().strip(), "a source changed");
        assertEquals("UP_TO_DATE", run(Map.of("SKIP_BUILD", "1"), List.of("bash", "-c", check)).out().strip());
    }

    @Test
    void theReleaseCheckerFindsWhatCentralWouldRefuse() throws Exception {
        // A bundle of two components: jnccl-core (POM elements inherited from jnccl-parent) without its
        // javadoc jar, and the parent, which the check is told must not be published.
        Path zip = caller.resolve("bundle.zip");
        String core = "dev/jnccl/jnccl-core/0.1.0/jnccl-core-0.1.0";
        String parent = "dev/jnccl/jnccl-parent/0.1.0/jnccl-parent-0.1.0";
        String parentPom = Files.readString(ROOT.resolve("pom.xml")).replace("-SNAPSHOT", "");
        String corePom = Files.readString(ROOT.resolve("core/pom.xml")).replace("-SNAPSHOT", "");
        try (java.util.zip.ZipOutputStream out = new java.util.zip.ZipOutputStream(Files.newOutputStream(zip))) {
            Map<String, String> files = new java.util.LinkedHashMap<>();
            files.put(parent + ".pom", parentPom);
            files.put(core + ".pom", corePom);
            files.put(core + ".jar", "jar");
            files.put(core + "-sources.jar", "sources");
            for (Map.Entry<String, String> file : new ArrayList<>(files.entrySet())) {
                for (String suffix : List.of(".md5", ".sha1", ".asc")) {
                    files.put(file.getKey() + suffix, Integer.toHexString(random.nextInt()));
                }
            }
            for (Map.Entry<String, String> file : files.entrySet()) {
                out.putNextEntry(new java.util.zip.ZipEntry(file.getKey()));
                out.write(file.getValue().getBytes(StandardCharsets.UTF_8));
                out.closeEntry();
            }
        }
        Run run = run(Map.of(), List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                ROOT.resolve("scripts/lib/CheckRelease.java").toString(), zip.toString(), "--signed",
                "--expect", "jnccl-core,jnccl-bom", "--absent", "jnccl-parent"));
        assertEquals(1, run.exit(), run.out() + run.err());
        List<String> problems = run.lines().stream().filter(l -> l.startsWith("PROBLEM ")).toList();
        assertEquals(List.of("PROBLEM jnccl-core: no jnccl-core-0.1.0-javadoc.jar",
                "PROBLEM jnccl-core: no jnccl-core-0.1.0-javadoc.jar.md5",
                "PROBLEM jnccl-core: no jnccl-core-0.1.0-javadoc.jar.sha1",
                "PROBLEM jnccl-core: no jnccl-core-0.1.0-javadoc.jar.asc",
                "PROBLEM jnccl-bom: missing from the bundle", "PROBLEM jnccl-parent: must not be published"), problems);
    }

    @Test
    void bundleRefusesAFolderItDidNotMakeAndKeepsEveryFile() throws Exception {
        Path mine = Files.createDirectories(caller.resolve("mine"));
        Map<Path, String> files = new HashMap<>();
        for (int i = 0; i < 1 + random.nextInt(5); i++) {
            Path file = mine.resolve("file" + i + "-" + random.nextInt(1000));
            String content = Long.toHexString(random.nextLong());
            Files.writeString(file, content);
            files.put(file, content);
        }
        for (List<String> command : List.of(List.of("mine"), List.of("--dry-run", "mine"))) {
            List<String> words = new ArrayList<>(List.of(ROOT.resolve("scripts/bundle.sh").toString()));
            words.addAll(command);
            Run run = run(Map.of(), words);
            assertEquals(2, run.exit(), command + ": " + run);
            assertTrue(run.err().contains("OUT " + mine + " is a folder with files in it that is not a bundle"), run.err());
            for (Map.Entry<Path, String> file : files.entrySet()) {
                assertEquals(file.getValue(), Files.readString(file.getKey()), file.getKey() + " after " + command);
            }
            assertEquals(files.size(), mine.toFile().list().length, command.toString());
        }
        Path plain = Files.writeString(caller.resolve("plain"), "x");
        Run run = run(Map.of(), List.of(ROOT.resolve("scripts/bundle.sh").toString(), "plain"));
        assertEquals(2, run.exit(), run.toString());
        assertTrue(run.err().contains("OUT " + plain + " exists and is not a folder"), run.err());
        assertEquals("x", Files.readString(plain));
    }

    @Test
    void bundleOutIsTheCallersAndOnlyABundleOrAnEmptyFolderIsReplaced() throws Exception {
        String bundle = ROOT.resolve("scripts/bundle.sh").toString();
        String name = "out" + random.nextInt(1000);
        Run fresh = run(Map.of(), List.of(bundle, "--dry-run", "sub/" + name + "/"));
        assertEquals(0, fresh.exit(), fresh.toString());
        assertEquals("bundle.sh: would build a new bundle in " + caller.resolve("sub").resolve(name), fresh.out().strip());

        Files.createDirectories(caller.resolve("empty"));
        Run empty = run(Map.of(), List.of(bundle, "--dry-run", "empty"));
        assertEquals("bundle.sh: would build a bundle in the empty folder " + caller.resolve("empty"), empty.out().strip());

        Path previous = Files.createDirectories(caller.resolve("previous"));
        Files.writeString(previous.resolve(".jnccl-bundle"), "jnccl bundle\n");
        Files.createDirectories(previous.resolve("bin"));
        Run replace = run(Map.of(), List.of(bundle, "--dry-run", "previous"));
        assertEquals(0, replace.exit(), replace.toString());
        assertEquals("bundle.sh: would replace the bundle in " + previous, replace.out().strip());
        assertTrue(Files.exists(previous.resolve("bin")), "a dry run deletes nothing");
    }

    @Test
    void benchRunsInTheCallersFolderSoRelativeFilesAreTheirs() throws Exception {
        String json = "results-" + random.nextInt(1000) + ".json";
        Run run = run(Map.of("DRY_RUN", "1", "JAVA_HOME", System.getProperty("java.home")),
                List.of(ROOT.resolve("scripts/bench.sh").toString(), "all_reduce", "--json", json, "--svg=plot.svg"));
        assertEquals(0, run.exit(), run.toString());
        List<String> lines = run.lines();
        assertEquals(caller.toString(), lines.getFirst(), run.toString());
        assertEquals(List.of("dev.jnccl.examples.bench.CollectiveBenchmark", "all_reduce", "--json", json, "--svg=plot.svg"),
                lines.subList(lines.size() - 5, lines.size()), run.toString());
        assertTrue(lines.contains("-Djnccl.backend=auto"), run.toString());
    }

    @Test
    void bundleLauncherTakesRanksLikeBenchSh() throws Exception {
        Path bundle = fakeBundle();
        Path mpirun = script(caller.resolve("mpirun"), """
                #!/bin/sh
                [ "$1" = --version ] && echo "mpirun (Open MPI) 4.1.4"
                exit 0
                """);
        int ranks = 2 + random.nextInt(7);
        String launch = bundle.resolve("tools/launch.sh").toString();
        Map<String, String> env = Map.of("DRY_RUN", "1", "MPIRUN", mpirun.toString());
        Run mpi = run(env, List.of("sh", launch, "bench", "Main", "all_reduce", "--launcher", "mpi", "--ranks",
                Integer.toString(ranks), "-g", "1"));
        assertEquals(0, mpi.exit(), mpi.toString());
        List<String> lines = mpi.lines();
        assertEquals(caller.toString(), lines.getFirst());
        assertEquals(List.of(mpirun.toString(), "-np", Integer.toString(ranks)), lines.subList(1, 4), mpi.toString());
        assertTrue(lines.contains("JNCCL_MPI_LIBRARY") && lines.contains("-Djnccl.backend=auto"), mpi.toString());
        assertEquals(List.of("Main", "all_reduce", "--launcher", "mpi", "-g", "1"),
                lines.subList(lines.size() - 6, lines.size()), mpi.toString());
        assertFalse(lines.contains("--ranks"), mpi.toString());

        // A process that mpirun started is one rank already: no second mpirun.
        Map<String, String> inJob = new HashMap<>(env);
        inJob.put("OMPI_COMM_WORLD_SIZE", "2");
        Run rank = run(inJob, List.of("sh", launch, "bench", "Main", "all_reduce", "--launcher=mpi"));
        assertEquals(0, rank.exit(), rank.toString());
        assertTrue(rank.lines().get(1).endsWith("/runtime/bin/java"), rank.toString());

        Run threads = run(env, List.of("sh", launch, "bench", "Main", "all_reduce", "--ranks", "2"));
        assertEquals(2, threads.exit(), threads.toString());
        assertTrue(threads.err().contains("bench: --ranks needs --launcher mpi"), threads.err());
    }

    @Test
    void bundleGpuTestsChooseTheBackendAsTheBuildsTestsDo() throws Exception {
        Path bundle = fakeBundle();
        Path args = caller.resolve("java-args.txt");
        for (String backend : new String[] {null, "cuda", "host"}) {
            Files.deleteIfExists(args);
            Map<String, String> env = new HashMap<>(Map.of("OUT", caller.resolve("reports").toString(),
                    "STUB_ARGS", args.toString()));
            if (backend != null) {
                env.put("JNCCL_TEST_BACKEND", backend);
            }
            Run run = run(env, List.of(bundle.resolve("bin/gpu-tests").toString()));
            assertEquals(0, run.exit(), run.toString());
            List<String> calls = Files.readAllLines(args);
            assertEquals(2, calls.size(), "the gpu-tagged tests and the conformance tests: " + calls);
            for (String call : calls) {
                assertTrue(call.contains(" -Djnccl.backend=" + (backend == null ? "auto" : backend) + " "), call);
            }
        }
    }

    /** A bundle's layout with the real launch files and a java that records its arguments. */
    private Path fakeBundle() throws IOException {
        Path bundle = caller.resolve("bundle");
        Files.createDirectories(bundle.resolve("tools"));
        Files.createDirectories(bundle.resolve("bin"));
        Files.createDirectories(bundle.resolve("lib"));
        Files.createDirectories(bundle.resolve("tests/core"));
        Files.copy(ROOT.resolve("scripts/lib/launch.sh"), bundle.resolve("tools/launch.sh"));
        Files.copy(ROOT.resolve("scripts/lib/mpi.sh"), bundle.resolve("tools/mpi.sh"));
        script(bundle.resolve("bin/gpu-tests"), Files.readString(ROOT.resolve("scripts/lib/bundle-gpu-tests.sh")));
        Files.createDirectories(bundle.resolve("runtime/bin"));
        script(bundle.resolve("runtime/bin/java"), """
                #!/bin/sh
                echo "java $* " >> "$STUB_ARGS"
                """);
        return bundle;
    }

    private static Path script(Path path, String text) throws IOException {
        Files.writeString(path, text);
        Files.setPosixFilePermissions(path, PosixFilePermissions.fromString("rwxr-xr-x"));
        return path;
    }

    private Run run(Map<String, String> environment, List<String> command) throws Exception {
        Path out = Files.createTempFile("scripts-test-", ".out");
        Path err = Files.createTempFile("scripts-test-", ".err");
        try {
            // Files, not pipes: the wait below bounds the run even if the script floods its output.
            ProcessBuilder builder = new ProcessBuilder(command).directory(caller.toFile())
                    .redirectOutput(out.toFile()).redirectError(err.toFile());
            builder.environment().keySet().removeIf(name -> name.startsWith("OMPI_") || name.startsWith("PMI"));
            builder.environment().putAll(environment);
            Process process = builder.start();
            if (!process.waitFor(60, TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                throw new AssertionError(command + " did not finish in 60 s: " + Files.readString(err));
            }
            return new Run(process.exitValue(), Files.readString(out, StandardCharsets.UTF_8),
                    Files.readString(err, StandardCharsets.UTF_8));
        } finally {
            Files.deleteIfExists(out);
            Files.deleteIfExists(err);
        }
    }

    private static Path repositoryRoot() {
        for (Path dir = Path.of("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
            if (Files.isRegularFile(dir.resolve("scripts/bundle.sh"))) {
                return dir;
            }
        }
        throw new IllegalStateException("no scripts/bundle.sh above " + Path.of("").toAbsolutePath());
    }
}
