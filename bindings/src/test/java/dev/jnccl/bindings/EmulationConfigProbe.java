package dev.jnccl.bindings;

import static java.lang.foreign.ValueLayout.JAVA_INT;

import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.testsupport.NativeEnv;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * Child-JVM entry point for {@link EmulationConfigTest}. Each argument is one case: {@code NAME=value}
 * pairs separated by {@code \u0001}. For each case it sets the variables in the C environment, loads
 * the libraries ({@link NativeLibraries#load()}: a refused emulation is not kept, so the next case is
 * judged afresh) and prints, i counting the cases from 0, {@code CASE i FAILED class: message} or
 * {@code CASE i LOADED status=s
 * devices=n} (cudaGetDeviceCount). A load that works is final in a JVM, so only the last case may
 * succeed; {@code --check} before a case checks it with the loader's own check only
 * ({@code CASE i ACCEPTED}).
 */
public final class EmulationConfigProbe {
    private EmulationConfigProbe() {}

    public static void main(String[] args) {
        int n = 0;
        for (int i = 0; i < args.length; i++, n++) {
            boolean checkOnly = args[i].equals("--check");
            String spec = checkOnly ? args[++i] : args[i];
            List<String> names = new ArrayList<>();
            List<String> values = new ArrayList<>();
            for (String pair : spec.split("\u0001")) {
                int eq = pair.indexOf('=');
                names.add(pair.substring(0, eq));
                values.add(pair.substring(eq + 1));
            }
            List<String> setArgs = new ArrayList<>();
            for (int k = 0; k < names.size(); k++) {
                setArgs.add(names.get(k));
                setArgs.add(values.get(k));
            }
            try (NativeEnv ignored = NativeEnv.set(setArgs.toArray(String[]::new))) {
                if (checkOnly) {
                    Path file = HostLibrary.extract();
                    try {
                        HostLibrary.checkConfiguration(file);
                    } finally {
                        Files.deleteIfExists(file);
                    }
                    System.out.println("CASE " + n + " ACCEPTED");
                } else {
                    NativeLibraries.load();
                    try (Arena arena = Arena.ofConfined()) {
                        MemorySegment count = arena.allocate(JAVA_INT);
                        int status = CudaRuntime.cudaGetDeviceCount(count);
                        System.out.println("CASE " + n + " LOADED status=" + status + " devices="
                                + count.get(JAVA_INT, 0));
                    }
                }
            } catch (Throwable t) {
                System.out.println("CASE " + n + " FAILED " + t.getClass().getName() + ": " + t.getMessage());
            }
        }
    }
}
