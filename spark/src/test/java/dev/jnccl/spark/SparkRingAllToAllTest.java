package dev.jnccl.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The example program in Spark barrier mode (what {@code scripts/run-example.sh --launcher spark}
 * runs): its own local-mode Spark context, every element checked, {@code OK} last.
 */
class SparkRingAllToAllTest {
    @Test
    void threeTasksCheckEveryElementAndEndWithOk() {
        ByteArrayOutputStream captured = new ByteArrayOutputStream();
        PrintStream original = System.out;
        int status;
        System.setOut(new PrintStream(captured, true, StandardCharsets.UTF_8));
        try {
            status = SparkRingAllToAll.run(new String[] {"--launcher", "spark", "--ranks", "3", "--elements", "1K",
                    "--iterations", "2"});
        } finally {
            System.setOut(original);
        }
        String out = captured.toString(StandardCharsets.UTF_8);
        System.out.print(out);
        List<String> lines = out.lines().toList();
        assertEquals(0, status, out);
        assertEquals("OK", lines.getLast(), out);
        for (int rank = 0; rank < 3; rank++) {
            String prefix = "rank " + rank + " (device " + rank + "): 2 iteration(s), 12,288 elements checked";
            assertTrue(lines.stream().anyMatch(l -> l.startsWith(prefix) && l.endsWith(", OK")), prefix + "\n" + out);
        }
    }

    @Test
    void aBadCommandLineIsRefusedBeforeSparkStarts() {
        assertEquals(2, SparkRingAllToAll.run(new String[] {"--ranks", "0"}));
        assertEquals(2, SparkRingAllToAll.run(new String[] {"--launcher", "mpi"}));
        assertEquals(2, SparkRingAllToAll.run(new String[] {"--gpus", "2"}));
    }
}
