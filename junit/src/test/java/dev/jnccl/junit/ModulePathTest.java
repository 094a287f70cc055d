package dev.jnccl.junit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.testsupport.ChildJvm;
import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * jnccl-junit on the module path, as a modular user project runs it: a test module that requires
 * {@code dev.jnccl.junit}, compiled and run in a child JVM with jnccl's modules, JUnit's and SLF4J's
 * on the module path (the host emulation), through JUnit's launcher. Its multi-rank test passes at
 * worlds 1 and 3, its fault test fails naming the faulty rank (the extension's own native access),
 * and without {@code opens} to {@code dev.jnccl.junit} every invocation says which package to open.
 */
class ModulePathTest {
    private static final List<String> JARS = List.of("slf4j-api-", "junit-jupiter-api-", "junit-jupiter-engine-",
            "junit-platform-engine-", "junit-platform-commons-", "junit-platform-launcher-", "opentest4j-",
            "apiguardian-api-");

    private static final String TEST = """
            package mp.check;

            import static org.junit.jupiter.api.Assertions.assertEquals;

            import dev.jnccl.Communicator;
            import dev.jnccl.junit.InjectFault;
            import dev.jnccl.junit.MultiRankTest;
            import dev.jnccl.junit.RankInfo;

            class SumTest {
                @MultiRankTest(worlds = {1, 3})
                void ranksAgree(Communicator comm, RankInfo me) {
                    long sum = 0;
                    for (long value : comm.allGatherLongsHost(1000L + me.rank())) {
                        sum += value;
                    }
                    assertEquals(1000L * me.world() + me.world() * (me.world() - 1) / 2, sum);
                }

                @MultiRankTest(worlds = 2)
                @InjectFault(kind = InjectFault.Kind.FAIL, rank = 1, at = 1)
                void rankOneFails(Communicator comm) {
                    try (var stream = dev.jnccl.cuda.CudaStream.create();
                         var memory = dev.jnccl.cuda.DeviceMemory.allocate(dev.jnccl.DType.FP32, 16)) {
                        comm.allReduce(memory.tensor(dev.jnccl.DType.FP32), dev.jnccl.ReduceOp.SUM, stream);
                        comm.synchronize();
                    }
                }
            }
            """;

    private static final String MAIN = """
            package mp.check;

            import org.junit.platform.engine.TestExecutionResult;
            import org.junit.platform.engine.discovery.DiscoverySelectors;
            import org.junit.platform.launcher.TestExecutionListener;
            import org.junit.platform.launcher.TestIdentifier;
            import org.junit.platform.launcher.core.LauncherDiscoveryRequestBuilder;
            import org.junit.platform.launcher.core.LauncherFactory;

            public class Main {
                public static void main(String[] args) {
                    TestExecutionListener print = new TestExecutionListener() {
                        @Override
                        public void executionFinished(TestIdentifier id, TestExecutionResult result) {
                            if (id.isTest()) {
                                System.out.println("RESULT " + id.getDisplayName() + " " + result.getStatus() + result
                                        .getThrowable().map(t -> " " + t.getMessage().lines().findFirst().orElse(""))
                                        .orElse(""));
                            }
                        }
                    };
                    LauncherFactory.create().execute(LauncherDiscoveryRequestBuilder.request()
                            .selectors(DiscoverySelectors.selectClass(SumTest.class)).build(), print);
                }
            }
            """;

    @Test
    void aTestModuleRunsMultiRankTestsAndFaults(@TempDir Path dir) throws Exception {
        List<String> results = run(dir, "opens mp.check to org.junit.platform.commons, dev.jnccl.junit;");
        assertEquals(3, results.size(), results::toString);
        assertTrue(results.contains("RESULT world 1 [host] SUCCESSFUL"), results::toString);
        assertTrue(results.contains("RESULT world 3 [host] SUCCESSFUL"), results::toString);
        assertTrue(results.contains("RESULT world 2 [host] FAILED world 2 [host] of SumTest.rankOneFails(): rank 1"
                + " failed"), results::toString);
    }

    @Test
    void aTestPackageNotOpenToTheExtensionIsNamed(@TempDir Path dir) throws Exception {
        List<String> results = run(dir, "opens mp.check to org.junit.platform.commons;");
        assertEquals(3, results.size(), results::toString);
        for (String result : results) {
            assertTrue(result.endsWith(" FAILED @MultiRankTest on SumTest." + (result.contains("world 2") ? "rankOneFails"
                    : "ranksAgree") + "(): jnccl-junit cannot call it; on the module path, open its package mp.check"
                    + " to dev.jnccl.junit (as to org.junit.platform.commons)"), result);
        }
    }

    /** Compiles the test module with {@code opens} and runs it; returns its RESULT lines. */
    private static List<String> run(Path dir, String opens) throws IOException, InterruptedException {
        Path source = dir.resolve("src/mp.check/mp/check");
        Files.createDirectories(source);
        Files.writeString(source.resolve("SumTest.java"), TEST);
        Files.writeString(source.resolve("Main.java"), MAIN);
        Files.writeString(dir.resolve("src/mp.check/module-info.java"), "module mp.check {\n"
                + "    requires dev.jnccl.junit;\n    requires org.junit.platform.launcher;\n    " + opens + "\n}\n");
        String modulePath = modulePath();
        Path out = dir.resolve("out");
        exec(dir, List.of(tool("javac"), "-d", out.toString(), "--module-path", modulePath, "--module-source-path",
                dir.resolve("src").toString(), "-m", "mp.check"));
        String output = exec(dir, List.of(tool("java"),
                "--enable-native-access=dev.jnccl.bindings,dev.jnccl.core,dev.jnccl.threads,dev.jnccl.junit",
                "-Djnccl.backend=host", "--module-path", modulePath + File.pathSeparator + out,
                "--add-modules", "ALL-MODULE-PATH", "-m", "mp.check/mp.check.Main"));
        return output.lines().filter(line -> line.startsWith("RESULT ")).toList();
    }

    private static String tool(String name) {
        return Path.of(System.getProperty("java.home"), "bin", name).toString();
    }

    /** Runs {@code command} (at most 120 s) and returns its output; fails on a non-zero exit status. */
    private static String exec(Path dir, List<String> command) throws IOException, InterruptedException {
        Path log = Files.createTempFile(dir, "child-", ".log");
        Process process = ChildJvm.builder(command, log).start();
        if (!process.waitFor(120, TimeUnit.SECONDS)) {
            process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
            throw new AssertionError(command.getFirst() + " did not finish in 120 s:\n" + Files.readString(log));
        }
        String output = Files.readString(log, StandardCharsets.UTF_8);
        assertEquals(0, process.exitValue(), () -> String.join(" ", command) + "\n" + output);
        return output;
    }

    /**
     * jnccl's modules (exploded: the reactor's target/classes, or jars) and the jars of JUnit, its
     * dependencies and SLF4J, from this test's class path: nothing else, so that no jar without a
     * module name is on the module path.
     */
    private static String modulePath() {
        List<String> entries = new ArrayList<>();
        for (String entry : ChildJvm.classPath(ModulePathTest.class).split(File.pathSeparator)) {
            Path path = Path.of(entry);
            String name = path.getFileName().toString();
            boolean jnccl = Files.isDirectory(path) ? Files.exists(path.resolve("module-info.class"))
                    : name.startsWith("jnccl-") && !name.startsWith("jnccl-test-support");
            if (jnccl || JARS.stream().anyMatch(name::startsWith)) {
                entries.add(entry);
            }
        }
        return String.join(File.pathSeparator, entries);
    }
}
