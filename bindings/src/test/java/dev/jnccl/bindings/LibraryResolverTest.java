package dev.jnccl.bindings;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.function.UnaryOperator;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class LibraryResolverTest {
    private static final UnaryOperator<String> NOTHING = key -> null;

    @TempDir
    Path temp;

    private static LibraryResolver.Request request(List<String> linkerNames) {
        return new LibraryResolver.Request("libtest", "test.library", "TEST_LIBRARY", linkerNames,
                List.of("nvidia/test/lib"), List.of("libtest.so.2"), "HINT: install libtest");
    }

    /** A real shared library of this machine, found through the dynamic linker. */
    private static Path realLibrary() throws Exception {
        Dl.Handle libm = Dl.open("libm.so.6");
        try {
            return Path.of(libm.path());
        } finally {
            Dl.close(libm);
        }
    }

    @Test
    void missingLibraryListsEveryPlaceTriedWithTheLoadersError() throws IOException {
        Path site = temp.resolve("site-packages");
        Path wheelLib = Files.createDirectories(site.resolve("nvidia/test/lib")).resolve("libtest.so.2");
        Files.writeString(wheelLib, "not an ELF file");
        Path emptySite = Files.createDirectories(temp.resolve("empty-site"));

        NativeLibraryException e = assertThrows(NativeLibraryException.class, () -> LibraryResolver.resolve(
                request(List.of("libjnccl-no-such-1.so.2", "libjnccl-no-such-2.so.2")), NOTHING, NOTHING,
                List.of(site, emptySite)));
        String message = e.getMessage();
        assertTrue(message.startsWith("Could not load libtest. Tried:"), message);
        assertTrue(message.contains("test.library / TEST_LIBRARY: not set"), message);
        assertTrue(message.contains("libjnccl-no-such-1.so.2 (dynamic linker): libjnccl-no-such-1.so.2: cannot open shared object file"), message);
        assertTrue(message.contains("libjnccl-no-such-2.so.2 (dynamic linker): libjnccl-no-such-2.so.2: cannot open shared object file"), message);
        // The wheel file exists but is not a library: the dynamic linker's own complaint is shown.
        assertTrue(message.contains(wheelLib + ": " + wheelLib), message);
        assertTrue(message.contains(emptySite.resolve("nvidia/test/lib/libtest.so.2") + ": no such file"), message);
        assertTrue(message.endsWith("HINT: install libtest"), message);
    }

    @Test
    void propertyOverrideWinsOverTheDynamicLinker() throws Exception {
        Path real = realLibrary();
        Path copy = Files.copy(real, temp.resolve("libexplicit.so"));
        LibraryResolver.Resolved resolved = LibraryResolver.resolve(request(List.of("libc.so.6")),
                Map.of("test.library", copy.toString())::get, NOTHING, List.of());
        try {
            assertEquals(copy.toString(), resolved.path().toString());
            assertEquals("system property test.library", resolved.origin());
        } finally {
            Dl.close(resolved.handle());
        }
    }

    @Test
    void environmentVariableIsUsedWhenThePropertyIsNotSet() throws Exception {
        Path copy = Files.copy(realLibrary(), temp.resolve("libfromenv.so"));
        LibraryResolver.Resolved resolved = LibraryResolver.resolve(request(List.of("libc.so.6")), NOTHING,
                Map.of("TEST_LIBRARY", copy.toString())::get, List.of());
        try {
            assertEquals(copy.toString(), resolved.path().toString());
            assertEquals("environment variable TEST_LIBRARY", resolved.origin());
        } finally {
            Dl.close(resolved.handle());
        }
    }

    @Test
    void aBrokenExplicitSettingFailsInsteadOfFallingBack() {
        Path missing = temp.resolve("nowhere/libnccl.so.2");
        NativeLibraryException e = assertThrows(NativeLibraryException.class, () -> LibraryResolver.resolve(
                request(List.of("libc.so.6")), Map.of("test.library", missing.toString())::get, NOTHING, List.of()));
        assertTrue(e.getMessage().contains("system property test.library=" + missing), e.getMessage());
        assertTrue(e.getMessage().contains("cannot open shared object file: No such file or directory"), e.getMessage());
    }

    @Test
    void dynamicLinkerNamesResolveToTheRealFile() throws Exception {
        LibraryResolver.Resolved resolved = LibraryResolver.resolve(request(List.of("libjnccl-none.so", "libm.so.6")),
                NOTHING, NOTHING, List.of());
        try {
            assertTrue(resolved.path().isAbsolute(), resolved.path().toString());
            assertTrue(Files.exists(resolved.path()), resolved.path().toString());
            assertEquals("dynamic linker", resolved.origin());
        } finally {
            Dl.close(resolved.handle());
        }
    }

    @Test
    void pythonWheelsAreTheLastResort() throws Exception {
        Path site = temp.resolve("venv/lib/python3.12/site-packages");
        Path lib = Files.createDirectories(site.resolve("nvidia/test/lib")).resolve("libtest.so.2");
        Files.copy(realLibrary(), lib);
        List<Path> sites = LibraryResolver.pythonSitePackages(
                Map.of("VIRTUAL_ENV", temp.resolve("venv").toString())::get);
        assertEquals(site, sites.getFirst());
        LibraryResolver.Resolved resolved = LibraryResolver.resolve(request(List.of("libjnccl-none.so")), NOTHING,
                NOTHING, sites);
        try {
            assertEquals(lib.toString(), resolved.path().toString());
            assertEquals("Python wheel", resolved.origin());
        } finally {
            Dl.close(resolved.handle());
        }
    }
}
