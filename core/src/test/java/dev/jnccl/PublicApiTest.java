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
    void theLauncherSeamIsExportedToTheLauncherModulesOnly() {
        assertEquals(Set.of("dev.jnccl.threads", "dev.jnccl.mpi", "dev.jnccl.spark"),
                ExportedApi.exportTargets(Communicator.class, "dev.jnccl.spi"));
    }

    /** Users compose, they do not subclass: no public API type can be extended or has protected members. */
    @Test
    void noPublicTypeHasAProtectedMemberAndCommunicatorIsFinal() throws Exception {
        assertTrue(java.lang.reflect.Modifier.isFinal(Communicator.class.getModifiers()), "Communicator is final");
        List<String> found = new java.util.ArrayList<>();
        for (Class<?> type : ExportedApi.publicTypes(Communicator.class)) {
            for (java.lang.reflect.Member member : members(type)) {
                if (java.lang.reflect.Modifier.isProtected(member.getModifiers())) {
                    found.add(type.getName() + "." + member.getName());
                }
            }
        }
        assertEquals(List.of(), found, "protected members of public types");
    }

    private static List<java.lang.reflect.Member> members(Class<?> type) {
        List<java.lang.reflect.Member> members = new java.util.ArrayList<>();
        members.addAll(List.of(type.getDeclaredMethods()));
        members.addAll(List.of(type.getDeclaredConstructors()));
        members.addAll(List.of(type.getDeclaredFields()));
        return members;
    }

    @Test
    void noPublicOrProtectedSignatureNamesABindingOrInternalType() {
        ExportedApi.Report report = ExportedApi.leaksFromExports(Communicator.class, "dev.jnccl.bindings.",
                "dev.jnccl.internal.", "dev.jnccl.spi.");
        assertTrue(report.typesExamined() >= 20, "only " + report.typesExamined() + " public types examined");
        assertEquals(List.of(), report.leaks(), () -> String.join("\n", report.leaks()));
    }
}
