package dev.jnccl.testsupport;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** Runs a main class of the test class path in a fresh JVM, bounded in time. */
public final class ChildJvm {
    private ChildJvm() {}

    /**
     * How the child ended.
     *
     * @param exitCode its exit status
     * @param output   its standard output and error, interleaved
     */
    public record Result(int exitCode, String output) {}

    /**
     * Runs {@code main} with {@code args} in a new JVM of the same Java home and class path, with
     * {@code jvmArgs} and extra {@code environment} variables; fails if it takes over 60 seconds.
     */
    public static Result run(List<String> jvmArgs, Map<String, String> environment, Class<?> main, String... args)
            throws IOException, InterruptedException {
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.addAll(jvmArgs);
        command.add("-cp");
        command.add(System.getProperty("java.class.path"));
        command.add(main.getName());
        command.addAll(List.of(args));
        // Output goes to a file, so a child that hangs cannot block this thread on a pipe read:
        // the wait below is what bounds it.
        Path log = Files.createTempFile("jnccl-child-", ".log");
        try {
            ProcessBuilder builder = new ProcessBuilder(command).redirectErrorStream(true)
                    .redirectOutput(log.toFile());
            builder.environment().putAll(environment);
            Process process = builder.start();
            if (!process.waitFor(60, TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor(10, TimeUnit.SECONDS);
                throw new AssertionError("child JVM did not finish in 60 s: " + command + "\n"
                        + Files.readString(log, StandardCharsets.UTF_8));
            }
            return new Result(process.exitValue(), Files.readString(log, StandardCharsets.UTF_8));
        } finally {
            Files.deleteIfExists(log);
        }
    }
}
