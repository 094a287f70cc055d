package dev.jnccl.bindings;

import java.io.IOException;
import java.io.InputStream;
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
