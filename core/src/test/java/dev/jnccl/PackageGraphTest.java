package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The package graph of core, read from its main sources: the API packages ({@code dev.jnccl},
 * {@code dev.jnccl.cuda}, {@code dev.jnccl.spi}) may name each other's types and everything below
 * them; {@code dev.jnccl.internal} is the bottom layer and names nothing of jnccl but the bindings.
 * A class of internal that needs an API type belongs in the API package that uses it (package-private),
 * else internal and the API depend on each other and neither can be read, tested or changed alone.
 */
class PackageGraphTest {
    private static final String BINDINGS = "dev.jnccl.bindings";
    private static final Set<String> API = Set.of("dev.jnccl", "dev.jnccl.cuda", "dev.jnccl.spi");
    /** For each package of core, the jnccl packages its sources may name (the bindings' subpackages included). */
    private static final Map<String, Set<String>> ALLOWED = Map.of(
            "dev.jnccl", union(API, "dev.jnccl.internal", BINDINGS),
            "dev.jnccl.cuda", union(API, "dev.jnccl.internal", BINDINGS),
            "dev.jnccl.spi", union(API, "dev.jnccl.internal", BINDINGS),
            "dev.jnccl.internal", Set.of("dev.jnccl.internal", BINDINGS));

    /** A qualified name of jnccl: its package (lower-case segments) and the type or member after it. */
    private static final Pattern REFERENCE = Pattern.compile("\\bdev\\.jnccl((?:\\.[a-z_][a-z0-9_]*)*)\\.(?:[A-Z*])");
    /** Comments and string or character literals: what they name is no dependency. */
    private static final Pattern NOT_CODE = Pattern.compile(
            "/\\*.*?\\*/|//[^\\n]*|\"\"\".*?\"\"\"|\"(?:\\\\.|[^\"\\\\\\n])*\"|'(?:\\\\.|[^'\\\\\\n])*'", Pattern.DOTALL);
    private static final Pattern PACKAGE = Pattern.compile("^package\\s+([\\w.]+)\\s*;", Pattern.MULTILINE);

    @Test
    void coreMainSourcesFollowThePackageGraph() {
        Path sources = moduleDirectory().resolve("src/main/java");
        assertTrue(Files.isDirectory(sources.resolve("dev/jnccl/internal")), "no core sources at " + sources);
        assertEquals(List.of(), violations(sources), "references against the package graph of core");
    }

    /** The check itself can fail: an internal class naming an API type and an unknown package are both found. */
    @Test
    void violationsAreFound(@TempDir Path sources) throws IOException {
        write(sources, "dev/jnccl/internal/Low.java", """
                package dev.jnccl.internal;

                import dev.jnccl.bindings.nccl.Nccl; // allowed: the bindings
                import dev.jnccl.DType;

                /** Mentions {@link dev.jnccl.cuda.CudaStream} in a comment only, which is allowed. */
                final class Low {
                    String text = "dev.jnccl.spi.Command";
                    dev.jnccl.cuda.CudaEvent event;
                }
                """);
        write(sources, "dev/jnccl/cuda/Up.java", """
                package dev.jnccl.cuda;

                import static dev.jnccl.internal.Backoff.pause;
                import dev.jnccl.spi.*;
                import dev.jnccl.threads.ThreadsPack;
                """);
        write(sources, "dev/jnccl/extra/New.java", "package dev.jnccl.extra;\n");
        assertEquals(List.of(
                "dev/jnccl/cuda/Up.java: package dev.jnccl.cuda names dev.jnccl.threads",
                "dev/jnccl/extra/New.java: package dev.jnccl.extra is not in the package graph of core",
                "dev/jnccl/internal/Low.java: package dev.jnccl.internal names dev.jnccl",
                "dev/jnccl/internal/Low.java: package dev.jnccl.internal names dev.jnccl.cuda"), violations(sources));
    }

    /** Each reference against {@link #ALLOWED}, as "file: package P names Q", sorted. */
    private static List<String> violations(Path sources) {
        Set<String> found = new TreeSet<>();
        try (Stream<Path> files = Files.walk(sources)) {
            for (Path file : files.filter(f -> f.toString().endsWith(".java")).toList()) {
                String name = sources.relativize(file).toString().replace('\\', '/');
                String text = Files.readString(file);
                Matcher declared = PACKAGE.matcher(text);
                if (!declared.find()) {
                    continue; // module-info.java: its requires and exports are checked by PublicApiTest
                }
                String from = declared.group(1);
                Set<String> allowed = ALLOWED.get(from);
                if (allowed == null) {
                    found.add(name + ": package " + from + " is not in the package graph of core");
                    continue;
                }
                Matcher reference = REFERENCE.matcher(NOT_CODE.matcher(text).replaceAll(" "));
                while (reference.find()) {
                    String to = "dev.jnccl" + reference.group(1);
                    String layer = to.equals(BINDINGS) || to.startsWith(BINDINGS + ".") ? BINDINGS : to;
                    if (!allowed.contains(layer)) {
                        found.add(name + ": package " + from + " names " + to);
                    }
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        return new ArrayList<>(found);
    }

    /** Surefire runs in the module's directory and also passes it as {@code basedir}. */
    private static Path moduleDirectory() {
        return Path.of(System.getProperty("basedir", System.getProperty("user.dir")));
    }

    private static Set<String> union(Set<String> first, String... more) {
        Set<String> all = new TreeSet<>(first);
        all.addAll(List.of(more));
        return Set.copyOf(all);
    }

    private static void write(Path root, String file, String text) throws IOException {
        Path path = root.resolve(file);
        Files.createDirectories(path.getParent());
        Files.writeString(path, text);
    }
}
