package dev.jnccl.bindings;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.function.UnaryOperator;

/**
 * Finds one native library: the explicit setting first, then the dynamic linker's names, then the
 * NVIDIA wheels of Python environments. Each candidate is opened with the dynamic linker, so a
 * failure reports the loader's real error for every place tried.
 */
final class LibraryResolver {

    /**
     * What to look for.
     *
     * @param displayName   human name, e.g. "NCCL"
     * @param property      system property that names the file
     * @param environment   environment variable that names the file
     * @param linkerNames   names handed to the dynamic linker, in order
     * @param wheelDirs     directories relative to a site-packages directory, e.g. nvidia/nccl/lib
     * @param wheelFiles    file names inside those directories
     * @param hint          what the user can do when nothing is found
     */
    record Request(String displayName, String property, String environment, List<String> linkerNames,
                   List<String> wheelDirs, List<String> wheelFiles, String hint) {}

    /** Where a library was found. */
    record Resolved(Dl.Handle handle, String origin) {
        Path path() {
            return Path.of(handle.path());
        }
    }

    private LibraryResolver() {}

    static Resolved resolve(Request request, UnaryOperator<String> properties, UnaryOperator<String> environment,
                            List<Path> sitePackages) {
        List<String> tried = new ArrayList<>();
        String explicit = properties.apply(request.property());
        String explicitSource = "system property " + request.property();
        if (explicit == null || explicit.isBlank()) {
            explicit = environment.apply(request.environment());
            explicitSource = "environment variable " + request.environment();
        }
        if (explicit != null && !explicit.isBlank()) {
            // An explicit setting is the user's decision: never fall back to another file silently.
            try {
                return new Resolved(Dl.open(explicit), explicitSource);
            } catch (Dl.DlException e) {
                throw new NativeLibraryException("Could not load " + request.displayName() + " from " + explicitSource
                        + "=" + explicit + ": " + e.getMessage() + "\n" + request.hint());
            }
        }
        tried.add(request.property() + " / " + request.environment() + ": not set");
        for (String name : request.linkerNames()) {
            try {
                return new Resolved(Dl.open(name), "dynamic linker");
            } catch (Dl.DlException e) {
                tried.add(name + " (dynamic linker): " + e.getMessage());
            }
        }
        if (sitePackages.isEmpty() && !request.wheelDirs().isEmpty()) {
            tried.add("Python wheels: no site-packages directory found"
                    + " (looked at $VIRTUAL_ENV, $CONDA_PREFIX, $PYTHONPATH, ~/.local, /usr/local, /usr)");
        }
        for (Path site : sitePackages) {
            for (String dir : request.wheelDirs()) {
                for (String file : request.wheelFiles()) {
                    Path candidate = site.resolve(dir).resolve(file);
                    if (!Files.exists(candidate)) {
                        tried.add(candidate + ": no such file");
                        continue;
                    }
                    try {
                        return new Resolved(Dl.open(candidate.toString()), "Python wheel");
                    } catch (Dl.DlException e) {
                        tried.add(candidate + ": " + e.getMessage());
                    }
                }
            }
        }
        StringBuilder message = new StringBuilder("Could not load ").append(request.displayName()).append(". Tried:");
        for (String t : tried) {
            message.append("\n  - ").append(t);
        }
        message.append('\n').append(request.hint());
        throw new NativeLibraryException(message.toString());
    }

    /** site-packages / dist-packages directories of the Python environments this machine shows. */
    static List<Path> pythonSitePackages(UnaryOperator<String> environment) {
        Set<Path> prefixes = new LinkedHashSet<>();
        for (String variable : List.of("VIRTUAL_ENV", "CONDA_PREFIX")) {
            String prefix = environment.apply(variable);
            if (prefix != null && !prefix.isBlank()) {
                prefixes.add(Path.of(prefix));
            }
        }
        String home = System.getProperty("user.home");
        if (home != null) {
            prefixes.add(Path.of(home, ".local"));
        }
        prefixes.add(Path.of("/usr/local"));
        prefixes.add(Path.of("/usr"));

        Set<Path> sites = new LinkedHashSet<>();
        String pythonPath = environment.apply("PYTHONPATH");
        if (pythonPath != null) {
            for (String entry : pythonPath.split(":")) {
                if (!entry.isBlank() && Files.isDirectory(Path.of(entry))) {
                    sites.add(Path.of(entry));
                }
            }
        }
        for (Path prefix : prefixes) {
            Path lib = prefix.resolve("lib");
            if (!Files.isDirectory(lib)) {
                continue;
            }
            try (DirectoryStream<Path> pythons = Files.newDirectoryStream(lib, "python3*")) {
                for (Path python : pythons) {
                    for (String kind : List.of("site-packages", "dist-packages")) {
                        if (Files.isDirectory(python.resolve(kind).resolve("nvidia"))) {
                            sites.add(python.resolve(kind));
                        }
                    }
                }
            } catch (IOException e) {
                // An unreadable directory is just not a candidate.
            }
        }
        return List.copyOf(sites);
    }
}
