package dev.jnccl.testsupport;

import static org.junit.jupiter.api.Assertions.assertEquals;

import dev.jnccl.testsupport.fixture.Fixture;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import org.junit.jupiter.api.Test;

/** The signature scan finds what it must (every kind of position) and nothing that is not API. */
class ExportedApiTest {

    @Test
    void findsForbiddenTypesInEveryPublicOrProtectedPosition() {
        ExportedApi.Report report = ExportedApi.leaks(Fixture.class, List.of("dev.jnccl.testsupport.fixture"),
                "java.util.concurrent.");
        assertEquals(2, report.typesExamined(), "Fixture and Fixture$Nested (Inner is package-private)");
        Set<String> expected = new TreeSet<>(List.of(
                "dev.jnccl.testsupport.fixture.Fixture.field: java.util.concurrent.Future",
                "dev.jnccl.testsupport.fixture.Fixture.parameter returns: java.util.concurrent.Callable",
                "dev.jnccl.testsupport.fixture.Fixture.thrower throws: java.util.concurrent.TimeoutException",
                "dev.jnccl.testsupport.fixture.Fixture.bounded parameter: java.util.concurrent.Future",
                "dev.jnccl.testsupport.fixture.Fixture.bounded type parameter T: java.util.concurrent.Future",
                "dev.jnccl.testsupport.fixture.Fixture$Nested.component task: java.util.concurrent.Callable",
                "dev.jnccl.testsupport.fixture.Fixture$Nested.task returns: java.util.concurrent.Callable",
                "dev.jnccl.testsupport.fixture.Fixture$Nested.<init> parameter: java.util.concurrent.Callable"));
        assertEquals(expected, new TreeSet<>(report.leaks()));
    }

    @Test
    void aCleanPrefixFindsNothing() {
        ExportedApi.Report report = ExportedApi.leaks(Fixture.class, List.of("dev.jnccl.testsupport.fixture"),
                "dev.jnccl.bindings.");
        assertEquals(List.of(), report.leaks());
    }
}
