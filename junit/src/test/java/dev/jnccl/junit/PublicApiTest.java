package dev.jnccl.junit;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.testsupport.ExportedApi;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** jnccl-junit exports one package, whose API names no type of the bindings or of core's internals. */
class PublicApiTest {
    @Test
    void junitApiIsOnePackageAndNamesNoBindingOrInternalType() {
        assertEquals(Set.of("dev.jnccl.junit"), ExportedApi.unqualifiedExports(MultiRankTest.class));
        ExportedApi.Report report = ExportedApi.leaksFromExports(MultiRankTest.class, "dev.jnccl.bindings.",
                "dev.jnccl.internal.");
        assertEquals(5, report.typesExamined(), "MultiRankTest, InjectFault, InjectFault.Kind, Placement, RankInfo");
        assertEquals(List.of(), report.leaks(), () -> String.join("\n", report.leaks()));
        assertTrue(ExportedApi.publicTypes(MultiRankTest.class).stream().noneMatch(
                type -> type.getSimpleName().equals("MultiRankExtension")), "the extension itself is not API");
    }
}
