package dev.jnccl.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The README's first program: it runs (on the host emulation without a GPU) and finds every
 * element right, and the README shows exactly the code of {@link FirstProgram}.
 */
@Timeout(300)
class FirstProgramTest {

    @ParameterizedTest(name = "{0} ranks")
    @ValueSource(ints = {1, 2, 3})
    void theFirstProgramChecksEveryElementAndFindsThemRight(int ranks) {
        assertEquals(0, FirstProgram.run(ranks));
    }

    @Test
    void theInputsDifferBetweenRanksAndAreWholeNumbersAboveZero() {
        float[] first = FirstProgram.inputOf(0);
        float[] second = FirstProgram.inputOf(1);
        assertNotEquals(java.util.Arrays.toString(first), java.util.Arrays.toString(second));
        for (float value : first) {
            assertTrue(value >= 1 && value <= 1000 && value == Math.rint(value), "input " + value);
        }
    }

    @Test
    void theReadmeShowsTheProgramAsItIs() throws Exception {
        String source = Files.readString(Path.of("src/main/java/dev/jnccl/examples/FirstProgram.java"),
                StandardCharsets.UTF_8);
        // The README's block starts at the imports: the package line is the examples module's.
        String shown = source.substring(source.indexOf("import "));
        String readme = Files.readString(Path.of("..", "README.md"), StandardCharsets.UTF_8);
        assertTrue(readme.contains("```java\n" + shown + "```\n"),
                "README.md's first program differs from examples/src/main/java/dev/jnccl/examples/FirstProgram.java:"
                        + " copy the file from its first import to its end into the README's block");
    }
}
