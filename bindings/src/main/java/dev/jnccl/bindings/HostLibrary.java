package dev.jnccl.bindings;

import static java.lang.foreign.ValueLayout.ADDRESS;

import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Locale;

/** The host emulation shipped in this jar, one build per platform. */
final class HostLibrary {
    static final String FILE_NAME = "libjnccl_host.so";

    private HostLibrary() {}

    /** linux-x86_64, linux-aarch64, ...: the resource directory of this platform's build. */
    static String platform() {
        String os = System.getProperty("os.name", "").toLowerCase(Locale.ROOT);
        String arch = System.getProperty("os.arch", "").toLowerCase(Locale.ROOT);
        String osId = os.startsWith("linux") ? "linux" : os.replace(' ', '_');
        String archId = switch (arch) {
            case "amd64", "x86_64" -> "x86_64";
            case "aarch64", "arm64" -> "aarch64";
            default -> arch;
        };
        return osId + "-" + archId;
    }

    static String resourceName() {
        return "/dev/jnccl/bindings/host/" + platform() + "/" + FILE_NAME;
    }

    /** The emulation's own export that says whether its environment variables are valid. */
    static final String CONFIG_ERROR_FUNCTION = "jnccl_emu_config_error";

    /**
     * Refuses the emulation when one of its environment variables (JNCCL_HOST_*) is malformed or out
     * of range: without this, a misspelt fault or delay would silently run a test without it. The
     * file is opened privately and closed again before {@link System#load} (which can never unload),
     * so a refused copy leaves nothing behind and a later attempt judges the environment afresh. The
     * emulation's text names each bad variable, its value and the accepted range.
     *
     * @param file the extracted emulation
     * @throws NativeLibraryException naming every bad variable
     */
    static void checkConfiguration(Path file) {
        Dl.Handle handle;
        try {
            handle = Dl.open(file.toAbsolutePath().toString());
        } catch (Dl.DlException e) {
            throw new NativeLibraryException("Could not load the host emulation from " + file + ": " + e.getMessage(), e);
        }
        String error;
        try {
            MemorySegment function = Dl.symbol(handle, CONFIG_ERROR_FUNCTION);
            if (function.equals(MemorySegment.NULL)) {
                throw new NativeLibraryException("The host emulation " + file + " has no " + CONFIG_ERROR_FUNCTION
                        + " (a build older than this jar?)");
            }
            MethodHandle call = Libc.linker().downcallHandle(function, FunctionDescriptor.of(ADDRESS));
            MemorySegment text = (MemorySegment) call.invokeExact();
            // NUL-terminated, at most 1 KiB (config.c); copied before the library is closed.
            error = text.equals(MemorySegment.NULL) ? null : text.reinterpret(4096).getString(0);
        } catch (NativeLibraryException e) {
            throw e;
        } catch (Throwable t) {
            throw new NativeLibraryException("The host emulation's " + CONFIG_ERROR_FUNCTION + " failed: " + t, t);
        } finally {
            Dl.close(handle);
        }
        if (error != null) {
            throw new NativeLibraryException("The host emulation refuses its environment: " + error
                    + ". Fix or unset the variable (bindings/src/main/c/README.md lists them).");
        }
    }

    /**
     * Copies the emulation to a private (0700) temporary file. The caller loads it and then deletes
     * it: the mapping stays valid, and no file is left behind even if the JVM is killed.
     */
    static Path extract() {
        String resource = resourceName();
        try (InputStream in = HostLibrary.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new NativeLibraryException("The host emulation is not built for " + platform() + " (no resource "
                        + resource + " in jnccl-bindings). Build jnccl on this platform with a C compiler,"
                        + " or use -Djnccl.backend=cuda on a machine with a GPU.");
            }
            Path file = Files.createTempFile("jnccl-host-", ".so",
                    PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
            Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
            return file;
        } catch (IOException e) {
            throw new NativeLibraryException("Could not extract the host emulation " + resource + " to a temporary file"
                    + " (java.io.tmpdir=" + System.getProperty("java.io.tmpdir") + "): " + e, e);
        }
    }
}
