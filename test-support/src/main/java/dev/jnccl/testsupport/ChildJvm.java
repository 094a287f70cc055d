package dev.jnccl.testsupport;

import java.io.File;
import java.io.IOException;
import java.net.URISyntaxException;
import java.net.URL;
import java.net.URLClassLoader;
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
        return runNamed(jvmArgs, environment, main, main.getName(), args);
    }

    /**
     * As {@link #run(List, Map, Class, String...)} for a main class named {@code main} that the test
     * cannot name as a class (a package-private tool of a library), found on {@code classPathOf}'s class path.
     */
    public static Result runNamed(List<String> jvmArgs, Map<String, String> environment, Class<?> classPathOf,
                                  String main, String... args) throws IOException, InterruptedException {
        List<String> command = commandNamed(jvmArgs, classPathOf, main, args);
        // Output goes to a file, so a child that hangs cannot block this thread on a pipe read:
        // the wait below is what bounds it.
        Path log = Files.createTempFile("jnccl-child-", ".log");
        try {
            ProcessBuilder builder = builder(command, log);
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

    /**
     * The command line of a child JVM that runs {@code main}: this JVM's {@code java}, {@code jvmArgs},
     * {@code -cp} {@link #classPath(Class)}, {@code main}, {@code args}. Callers that start it under
     * another program (mpirun) put that program's words before it.
     *
     * @param jvmArgs options for the child JVM
     * @param main    the main class
     * @param args    its arguments
     * @return the command, a mutable list
     */
    public static List<String> command(List<String> jvmArgs, Class<?> main, String... args) {
        return commandNamed(jvmArgs, main, main.getName(), args);
    }

    private static List<String> commandNamed(List<String> jvmArgs, Class<?> classPathOf, String main, String... args) {
        List<String> command = new ArrayList<>();
        command.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        command.addAll(jvmArgs);
        command.add("-cp");
        command.add(classPath(classPathOf));
        command.add(main);
        command.addAll(List.of(args));
        return command;
    }

    /**
     * A process builder for {@code command} whose standard output and error both go to {@code log}
     * (a file, not a pipe: a child that floods or hangs cannot block the test on a pipe read).
     *
     * @param command the command line, e.g. from {@link #command}
     * @param log     the file that receives the output
     * @return the builder; its environment is this JVM's, for the caller to adjust
     */
    public static ProcessBuilder builder(List<String> command, Path log) {
        return new ProcessBuilder(command).redirectErrorStream(true).redirectOutput(log.toFile());
    }

    /**
     * The class path for a child JVM that runs {@code main}: java.class.path plus the URLs of the
     * class loaders above {@code main}'s (JUnit's console launcher, used on the GPU machine, loads
     * the tests from its own -cp through a URLClassLoader, which java.class.path does not show).
     *
     * @param main a class the child must find
     * @return the class path, entries separated by {@link File#pathSeparator}
     */
    public static String classPath(Class<?> main) {
        List<String> entries = new ArrayList<>(List.of(System.getProperty("java.class.path").split(File.pathSeparator)));
        for (ClassLoader loader = main.getClassLoader(); loader != null; loader = loader.getParent()) {
            if (loader instanceof URLClassLoader urls) {
                for (URL url : urls.getURLs()) {
                    try {
                        entries.add(Path.of(url.toURI()).toString());
                    } catch (URISyntaxException | IllegalArgumentException e) {
                        // not a file: the child cannot use it either
                    }
                }
            }
        }
        return String.join(File.pathSeparator, entries);
    }
}
