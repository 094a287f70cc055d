package dev.jnccl.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ch.qos.logback.classic.Level;
import ch.qos.logback.classic.LoggerContext;
import ch.qos.logback.classic.joran.JoranConfigurator;
import ch.qos.logback.core.status.Status;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;

/**
 * The sample logback.xml of the README (docs/logback.xml): Logback reads it without an error, it
 * keeps jnccl's per-transaction DEBUG lines off and its INFO lines on, and the README shows it as it is.
 */
class LogbackSampleTest {
    private static final Path SAMPLE = Path.of("..", "docs", "logback.xml");

    @Test
    void theSampleKeepsJncclAtInfo() throws Exception {
        LoggerContext context = new LoggerContext();
        JoranConfigurator configurator = new JoranConfigurator();
        configurator.setContext(context);
        configurator.doConfigure(SAMPLE.toFile());
        for (Status status : context.getStatusManager().getCopyOfStatusList()) {
            assertTrue(status.getLevel() < Status.WARN, "Logback: " + status);
        }
        ch.qos.logback.classic.Logger transactions = context.getLogger("dev.jnccl.Communicator");
        assertEquals(Level.INFO, transactions.getEffectiveLevel());
        assertFalse(transactions.isDebugEnabled());
        assertTrue(context.getLogger("dev.jnccl.bindings.NativeLibraries").isInfoEnabled());
        assertTrue(context.getLogger("com.example.Train").isInfoEnabled());
        context.stop();
    }

    @Test
    void theReadmeShowsTheSampleAsItIs() throws Exception {
        String sample = Files.readString(SAMPLE, StandardCharsets.UTF_8);
        String readme = Files.readString(Path.of("..", "README.md"), StandardCharsets.UTF_8);
        assertTrue(readme.contains("```xml\n" + sample + "```\n"), "README.md's logback.xml differs from docs/logback.xml");
    }
}
