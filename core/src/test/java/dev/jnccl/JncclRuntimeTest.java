package dev.jnccl;

import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import dev.jnccl.bindings.NativeLibraries;
import dev.jnccl.bindings.VersionCodes;
import dev.jnccl.testsupport.ChildJvm;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * {@link JncclRuntime}: the backend, versions and device count without a communicator, checked
 * against the native calls decoded here by hand, and on the host emulation against the device
 * count it was started with (JNCCL_HOST_DEVICES, in child JVMs).
 */
class JncclRuntimeTest {

    @Test
    void versionsAreWhatTheLibrariesReport() {
        JncclRuntime runtime = JncclRuntime.query();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(JAVA_INT);
            assertEquals(0, Nccl.ncclGetVersion(out));
            int code = out.get(JAVA_INT, 0); // 2.9+ encoding: major * 10000 + minor * 100 + patch
            assertEquals(new LibraryVersion(code / 10000, code / 100 % 100, code % 100), runtime.nccl());
            assertEquals(0, CudaRuntime.cudaRuntimeGetVersion(out));
            code = out.get(JAVA_INT, 0); // major * 1000 + minor * 10
            assertEquals(new LibraryVersion(code / 1000, code % 1000 / 10, 0), runtime.cudaRuntime());
        }
        assertTrue(runtime.nccl().atLeast(2, 19), "jnccl loaded NCCL " + runtime.nccl() + ", below its minimum 2.19");
        assertTrue(runtime.cudaRuntime().major() >= 11, "CUDA runtime " + runtime.cudaRuntime());
        for (LibraryVersion version : List.of(runtime.nccl(), runtime.cudaRuntime(), runtime.cudaDriver())) {
            assertEquals(version, LibraryVersion.parse(version.toString()));
        }
    }

    @Test
    void backendIsTheOneTheLoaderResolvedAndCommunicatorsAgree() {
        JncclRuntime runtime = JncclRuntime.query();
        Backend expected = switch (NativeLibraries.load().backend()) {
            case CUDA -> Backend.CUDA;
            case HOST -> Backend.HOST;
            case AUTO -> throw new AssertionError("loader left AUTO");
        };
        assertEquals(expected, runtime.backend());
        // The loader's log line and the API write a library's version alike: one text per version.
        assertEquals(VersionCodes.text(NativeLibraries.load().ncclVersion()), runtime.nccl().toString());
        assertEquals(VersionCodes.text(NativeLibraries.load().cudaRuntimeVersion()), runtime.cudaRuntime().toString());
        assertEquals(VersionCodes.text(NativeLibraries.load().cudaDriverVersion()), runtime.cudaDriver().toString());
        try (Communicator comm = Communicator.single(0)) {
            assertEquals(runtime.backend(), comm.backend());
            assertEquals(runtime.nccl().toString(), comm.ncclVersion());
        }
    }

    @Test
    void deviceCountOnTheHostIsJncclHostDevices() {
        JncclRuntime runtime = JncclRuntime.query();
        assumeTrue(runtime.backend() == Backend.HOST, "counts the host emulation's virtual devices");
        String configured = System.getenv("JNCCL_HOST_DEVICES");
        assertEquals(configured == null ? 8 : Integer.parseInt(configured), runtime.deviceCount());
        assertEquals(runtime.deviceCount(), dev.jnccl.cuda.Cuda.deviceCount());
    }

    @Test
    void childJvmsSeeTheDeviceCountTheyWereStartedWith() throws Exception {
        assumeTrue(JncclRuntime.query().backend() == Backend.HOST, "sets the host emulation's device count");
        for (int devices : new int[] {3, 1, 0}) {
            ChildJvm.Result result = ChildJvm.run(List.of("--enable-native-access=ALL-UNNAMED", "-Djnccl.backend=host"),
                    Map.of("JNCCL_HOST_DEVICES", Integer.toString(devices)), PrintRuntime.class);
            assertEquals(0, result.exitCode(), result.output());
            assertTrue(result.output().contains("runtime: HOST " + devices + " devices"),
                    "JNCCL_HOST_DEVICES=" + devices + ": " + result.output());
        }
    }

    /** Child JVM main: prints the runtime query. */
    static final class PrintRuntime {
        public static void main(String[] args) {
            JncclRuntime runtime = JncclRuntime.query();
            System.out.println("runtime: " + runtime.backend() + " " + runtime.deviceCount() + " devices, NCCL "
                    + runtime.nccl());
        }
    }

    @Test
    void supportsFollowsTheNcclVersion() {
        LibraryVersion cuda = new LibraryVersion(13, 0, 0);
        JncclRuntime nccl219 = new JncclRuntime(Backend.CUDA, new LibraryVersion(2, 19, 3), cuda, cuda, 1);
        JncclRuntime nccl224 = new JncclRuntime(Backend.CUDA, new LibraryVersion(2, 24, 0), cuda, cuda, 1);
        JncclRuntime nccl29 = new JncclRuntime(Backend.CUDA, new LibraryVersion(2, 9, 9), cuda, cuda, 1);
        for (DType dtype : DType.values()) {
            boolean fp8 = dtype == DType.FP8_E4M3 || dtype == DType.FP8_E5M2;
            assertEquals(!fp8, nccl219.supports(dtype), dtype + " on NCCL 2.19");
            assertTrue(nccl224.supports(dtype), dtype + " on NCCL 2.24");
            assertEquals(!fp8 && dtype != DType.BF16, nccl29.supports(dtype), dtype + " on NCCL 2.9");
        }
        assertThrows(NullPointerException.class, () -> nccl219.supports(null));
    }

    @Test
    void libraryVersionsParseCompareAndRefuseGarbage() {
        assertEquals(new LibraryVersion(2, 28, 3), LibraryVersion.parse("2.28.3"));
        assertEquals(new LibraryVersion(13, 0, 0), LibraryVersion.parse(" 13.0 "));
        assertTrue(LibraryVersion.parse("2.28.3").compareTo(LibraryVersion.parse("2.9.12")) > 0);
        assertTrue(LibraryVersion.parse("2.28.3").atLeast(2, 28));
        assertFalse(LibraryVersion.parse("2.27.9").atLeast(2, 28));
        // Any components order and print as written, also those no library code can hold.
        assertTrue(new LibraryVersion(2, 100, 0).compareTo(new LibraryVersion(3, 0, 0)) < 0);
        assertTrue(new LibraryVersion(2, 100, 0).compareTo(new LibraryVersion(2, 99, 250)) > 0);
        assertEquals(0, new LibraryVersion(2, 100, 0).compareTo(LibraryVersion.parse("2.100")));
        assertEquals("2.100.250", new LibraryVersion(2, 100, 250).toString());
        // A version the loader keeps as a code becomes the same record.
        assertEquals(new LibraryVersion(2, 28, 3), LibraryVersion.of(VersionCodes.fromNccl(22803)));
        assertEquals(new LibraryVersion(12, 8, 0), LibraryVersion.of(VersionCodes.fromCuda(12080)));
        assertEquals(new LibraryVersion(2, 8, 4), LibraryVersion.of(VersionCodes.fromNccl(2804)));
        assertEquals("LibraryVersion.parse: '2' is not major.minor or major.minor.patch",
                assertThrows(IllegalArgumentException.class, () -> LibraryVersion.parse("2")).getMessage());
        assertEquals("LibraryVersion.parse: 'x' in '2.x.1' is not a number",
                assertThrows(IllegalArgumentException.class, () -> LibraryVersion.parse("2.x.1")).getMessage());
        assertEquals("LibraryVersion: negative component in 2.-1.0",
                assertThrows(IllegalArgumentException.class, () -> new LibraryVersion(2, -1, 0)).getMessage());
        assertEquals("JncclRuntime: deviceCount -1 is negative", assertThrows(IllegalArgumentException.class,
                () -> new JncclRuntime(Backend.HOST, LibraryVersion.parse("2.28.3"), LibraryVersion.parse("13.0"),
                        LibraryVersion.parse("13.0"), -1)).getMessage());
    }
}
