package dev.jnccl.bindings;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.testsupport.ChildJvm;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;
import org.slf4j.LoggerFactory;
import org.slf4j.helpers.NOPLogger;

/**
 * The native-access hint and the host-emulation warning reach the user whatever the logging setup:
 * through SLF4J when it shows WARN, else on stderr, also with no SLF4J provider at all.
 */
class NoticesTest {

    @Test
    void aLoggerThatDropsWarningsSendsTheNoticeToStderr() {
        String message = "notice " + UUID.randomUUID();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        Notices.warn(NOPLogger.NOP_LOGGER, message, new PrintStream(err, true, StandardCharsets.UTF_8));
        assertEquals("jnccl WARNING: " + message + System.lineSeparator(), err.toString(StandardCharsets.UTF_8));
    }

    @Test
    void aLoggerThatShowsWarningsGetsTheNoticeAndStderrNothing() {
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        Notices.warn(LoggerFactory.getLogger(NoticesTest.class), "notice " + UUID.randomUUID(),
                new PrintStream(err, true, StandardCharsets.UTF_8));
        assertEquals("", err.toString(StandardCharsets.UTF_8));
    }

    @Test
    void withoutAnySlf4jProviderBothWarningsReachStderr() throws Exception {
        // The class path of the tests minus Logback: SLF4J finds no provider and drops every log call.
        List<String> command = ChildJvm.command(List.of("-Djnccl.backend=auto"), NativeAccessProbe.class);
        int classPath = command.indexOf("-cp") + 1;
        command.set(classPath, Arrays.stream(command.get(classPath).split(File.pathSeparator))
                .filter(entry -> !entry.contains("logback")).collect(Collectors.joining(File.pathSeparator)));
        Path log = Files.createTempFile("jnccl-notices-", ".log");
        try {
            Process process = ChildJvm.builder(command, log).start();
            assertTrue(process.waitFor(60, TimeUnit.SECONDS), "child JVM did not finish in 60 s");
            String output = Files.readString(log, StandardCharsets.UTF_8);
            assertTrue(output.contains("SLF4J(W): No SLF4J providers were found"), "no provider expected:\n" + output);
            String hint = NativeAccess.message(NoticesTest.class.getModule());
            assertEquals(1, output.lines().filter(l -> l.equals("jnccl WARNING: " + hint)).count(), output);
            boolean emulation = output.lines().anyMatch(l -> l.startsWith("LOADED backend host"));
            assertEquals(emulation, output.contains("jnccl WARNING: jnccl.backend=auto: no CUDA"), output);
            assertFalse(output.contains("FAILED"), output);
        } finally {
            Files.deleteIfExists(log);
        }
    }
}
