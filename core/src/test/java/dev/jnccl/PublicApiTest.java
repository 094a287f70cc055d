package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.testsupport.ExportedApi;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * The public API of jnccl-core names no type of the bindings or of core's internals: those are
 * exported only to jnccl's own modules, so a user could not even name such a type. javac's
 * {@code -Xlint:exports} warns about the bindings; this test fails the build.
 */
class PublicApiTest {

    @Test
    void exportedPackagesAreTheApiPackages() {
        assertEquals(Set.of("dev.jnccl", "dev.jnccl.cuda"), ExportedApi.unqualifiedExports(Communicator.class));
    }

    @Test
    void noPublicOrProtectedSignatureNamesABindingOrInternalType() {
        ExportedApi.Report report = ExportedApi.leaksFromExports(Communicator.class, "dev.jnccl.bindings.",
                "dev.jnccl.internal.");
        assertTrue(report.typesExamined() >= 20, "only " + report.typesExamined() + " public types examined");
        assertEquals(List.of(), report.leaks(), () -> String.join("\n", report.leaks()));
    }
}
