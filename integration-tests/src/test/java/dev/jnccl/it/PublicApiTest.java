package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.testsupport.ExportedApi;
import dev.jnccl.threads.ThreadsCommunicators;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** The threads module's API names no type of the bindings or of core's internals (see core's PublicApiTest). */
class PublicApiTest {

    @Test
    void threadsApiNamesNoBindingOrInternalType() {
        assertEquals(Set.of("dev.jnccl.threads"), ExportedApi.unqualifiedExports(ThreadsCommunicators.class));
        ExportedApi.Report report = ExportedApi.leaksFromExports(ThreadsCommunicators.class, "dev.jnccl.bindings.",
                "dev.jnccl.internal.");
        assertTrue(report.typesExamined() >= 3, "only " + report.typesExamined() + " public types examined");
        assertEquals(List.of(), report.leaks(), () -> String.join("\n", report.leaks()));
    }
}
