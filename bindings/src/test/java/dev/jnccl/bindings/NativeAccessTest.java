package dev.jnccl.bindings;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;

import dev.jnccl.testsupport.ChildJvm;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class NativeAccessTest {

    @Test
    void messageNamesBothFlagForms() {
        String message = NativeAccess.message(NativeAccessTest.class.getModule());
        assertTrue(message.contains("the class path (unnamed module)"), message);
        assertTrue(message.contains("--enable-native-access=ALL-UNNAMED"), message);
        assertTrue(message.contains("--enable-native-access=dev.jnccl.bindings,dev.jnccl.core"), message);
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
