package dev.jnccl.bindings;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import dev.jnccl.testsupport.ChildJvm;
import java.io.File;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

class NativeAccessTest {

    @Test
    void classPathMessageNamesAllUnnamedOnly() {
        String message = NativeAccess.message(NativeAccessTest.class.getModule());
        assertTrue(message.contains("the class path (unnamed module)"), message);
        assertTrue(message.contains("--enable-native-access=ALL-UNNAMED "), message);
        // A module name in the flag would make the JVM warn about an unknown module on the class path.
        assertFalse(message.contains("dev.jnccl."), message);
    }

    @Test
    void modulePathMessageNamesOnlyTheModulesPresent() {
        List<String> modules = new ArrayList<>(NativeAccess.MODULES);
        Collections.shuffle(modules);
        Set<String> present = new HashSet<>(modules.subList(0, 1 + new Random().nextInt(modules.size())));
        present.add("org.slf4j"); // not jnccl's: never named
        String self = present.contains("dev.jnccl.bindings") ? "dev.jnccl.bindings" : modules.getFirst();
        String message = NativeAccess.message(self, present);
        String expected = NativeAccess.MODULES.stream().filter(m -> present.contains(m) || m.equals(self))
                .collect(Collectors.joining(","));
        assertTrue(message.contains("module " + self + ". "), message);
        assertTrue(message.contains("--enable-native-access=" + expected + " "), present + ": " + message);
        for (String absent : NativeAccess.MODULES) {
            if (!present.contains(absent) && !absent.equals(self)) {
                assertFalse(message.contains(absent), absent + " is absent: " + message);
            }
        }
        assertFalse(message.contains("ALL-UNNAMED") || message.contains("org.slf4j"), message);
    }

    @Test
    void withoutTheFlagJncclsHintFollowsTheJdkWarning() throws Exception {
        // The JDK's default, --illegal-native-access=warn: the first restricted call warns and then
        // enables native access, so jnccl must look before it to give its hint.
        ChildJvm.Result result = ChildJvm.run(List.of("-Djnccl.backend=host"), Map.of(), NativeAccessProbe.class);
        String output = result.output();
        String hint = NativeAccess.message(NativeAccessTest.class.getModule());
        assertEquals(1, output.lines().filter(l -> l.contains(hint)).count(), output);
        assertTrue(output.contains("WARNING: A restricted method"), "the JDK's own warning\n" + output);
        assertEquals(2, output.lines().filter(l -> l.startsWith("LOADED ")).count(), output);
        assertFalse(output.contains("dev.jnccl.mpi") || output.contains("Unknown module"), output);
    }

    @Test
    void onTheModulePathTheHintNamesOnlyTheModulesThere() throws Exception {
        // dev.jnccl.bindings and org.slf4j on the module path, the probe patched into the module;
        // dev.jnccl.core, threads and mpi are absent, so the flag must not name them.
        String modulePath = location(NativeAccess.class) + File.pathSeparator + location(org.slf4j.Logger.class);
        ChildJvm.Result result = ChildJvm.run(List.of("-Djnccl.backend=host", "--module-path", modulePath,
                "--add-modules", "dev.jnccl.bindings",
                "--patch-module", "dev.jnccl.bindings=" + location(NativeAccessProbe.class),
                "--add-exports", "dev.jnccl.bindings/dev.jnccl.bindings=ALL-UNNAMED"), Map.of(), NativeAccessProbe.class);
        String output = result.output();
        assertTrue(output.contains("module dev.jnccl.bindings. Add to the java command:"
                + " --enable-native-access=dev.jnccl.bindings "), output);
        for (String absent : List.of("dev.jnccl.core", "dev.jnccl.threads", "dev.jnccl.mpi", "ALL-UNNAMED")) {
            assertFalse(output.contains(absent), absent + "\n" + output);
        }
        assertEquals(2, output.lines().filter(l -> l.startsWith("LOADED ")).count(), output);
    }

    private static String location(Class<?> type) throws Exception {
        return Path.of(type.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
    }

    @Test
    void testsRunWithNativeAccessEnabled() {
        assertTrue(NativeAccess.isEnabled(), "surefire must pass --enable-native-access=ALL-UNNAMED");
    }

    @Test
    void deniedNativeAccessSaysWhichFlagIsMissing() throws Exception {
        ChildJvm.Result result = ChildJvm.run(List.of("--illegal-native-access=deny", "-Djnccl.backend=cuda"),
                Map.of(), NativeAccessProbe.class);
        String expected = "FAILED " + NativeLibraryException.class.getName() + ": "
                + NativeAccess.message(NativeAccessTest.class.getModule());
        assertEquals(2, result.output().lines().filter(expected::equals).count(), result.output());
    }

    @Test
    void missingLibrariesFailWithTheListOfPlacesTriedEveryTime() throws Exception {
        boolean cudart = loadable("libcudart.so.13") || loadable("libcudart.so.12");
        assumeFalse(cudart && loadable("libnccl.so.2"),
                "this machine has a CUDA runtime and NCCL, so it cannot show the missing-library message");
        // With a CUDA runtime but no NCCL (a CUDA toolkit without NCCL), the NCCL search is what fails.
        String what = cudart ? "NCCL (libnccl)" : "the CUDA runtime (libcudart)";
        String property = cudart ? "jnccl.nccl.library / JNCCL_NCCL_LIBRARY" : "jnccl.cudart.library / JNCCL_CUDART_LIBRARY";
        List<String> names = cudart ? List.of("libnccl.so.2") : List.of("libcudart.so.13", "libcudart.so.12");

        ChildJvm.Result result = ChildJvm.run(List.of("--enable-native-access=ALL-UNNAMED", "-Djnccl.backend=cuda"),
                Map.of("VIRTUAL_ENV", "", "CONDA_PREFIX", "", "PYTHONPATH", ""), NativeAccessProbe.class);
        List<String> failures = result.output().lines().filter(l -> l.startsWith("FAILED ")).toList();
        assertEquals(2, failures.size(), result.output());
        for (String line : failures) {
            // Never ExceptionInInitializerError / NoClassDefFoundError, the second time included.
            assertTrue(line.startsWith("FAILED " + NativeLibraryException.class.getName() + ": Could not load " + what
                    + ". Tried:"), line);
        }
        String output = result.output();
        assertTrue(output.contains(property + ": not set"), output);
        for (String name : names) {
            assertTrue(output.contains(name + " (dynamic linker): " + name + ": cannot open shared object file"), output);
        }
        assertTrue(output.contains("-Djnccl.backend=host"), output);
        assertFalse(output.contains("ExceptionInInitializerError") || output.contains("NoClassDefFoundError"), output);
    }

    private static boolean loadable(String name) {
        try {
            Dl.close(Dl.open(name));
            return true;
        } catch (Dl.DlException e) {
            return false;
        }
    }
}
