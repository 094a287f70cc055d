import java.io.ByteArrayInputStream;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.zip.ZipEntry;
import java.util.zip.ZipFile;
import javax.xml.parsers.DocumentBuilderFactory;
import javax.xml.xpath.XPathFactory;
import org.w3c.dom.Document;

/**
 * Checks a Central Portal bundle (the zip of central-publishing-maven-plugin) as the Portal would:
 * every component has its POM, a jar component its jar, sources and javadoc jars, every file its
 * signature (with --signed) and checksums, and every POM the required elements (name, description,
 * url, license, developer, scm url and connection; inherited from a parent in the bundle counts).
 * Also that the expected modules are all there and the unpublished ones are not.
 * Run: java scripts/lib/CheckRelease.java BUNDLE.zip [--signed] [--expect a,b,...] [--absent c,d]
 * Prints one line per component and every problem; exit status 1 when there is any.
 */
public final class CheckRelease {
    private static final List<String> REQUIRED = List.of("name", "description", "url", "licenses/license/name",
            "developers/developer/name", "scm/url", "scm/connection");

    record Component(String group, String artifact, String version, Set<String> files) {}

    public static void main(String[] args) throws Exception {
        Path bundle = Path.of(args[0]);
        boolean signed = List.of(args).contains("--signed");
        List<String> expected = listAfter(args, "--expect");
        List<String> absent = listAfter(args, "--absent");
        List<String> problems = new ArrayList<>();
        Map<String, Component> components = new TreeMap<>();
        Map<String, Document> poms = new TreeMap<>();
        try (ZipFile zip = new ZipFile(bundle.toFile())) {
            for (ZipEntry entry : zip.stream().filter(e -> !e.isDirectory()).toList()) {
                String[] parts = entry.getName().split("/");
                if (parts.length < 4) {
                    problems.add(entry.getName() + ": not in group/artifact/version/");
                    continue;
                }
                String version = parts[parts.length - 2];
                String artifact = parts[parts.length - 3];
                String group = String.join(".", List.of(parts).subList(0, parts.length - 3));
                Component c = components.computeIfAbsent(artifact,
                        a -> new Component(group, a, version, new java.util.TreeSet<>()));
                c.files().add(parts[parts.length - 1]);
                if (entry.getName().endsWith(".pom")) {
                    poms.put(artifact, parse(zip.getInputStream(entry).readAllBytes()));
                }
            }
        }
        for (Component c : components.values()) {
            checkFiles(c, signed, poms.get(c.artifact()), problems);
            if (poms.containsKey(c.artifact())) {
                checkPom(c.artifact(), poms, problems);
            }
            System.out.println(c.group() + ":" + c.artifact() + ":" + c.version() + "  " + c.files().size() + " files");
        }
        expected.stream().filter(a -> !components.containsKey(a)).forEach(a -> problems.add(a + ": missing from the bundle"));
        absent.stream().filter(components::containsKey).forEach(a -> problems.add(a + ": must not be published"));
        problems.forEach(p -> System.out.println("PROBLEM " + p));
        System.out.println(problems.isEmpty() ? "OK: " + components.size() + " components, every check passed"
                : problems.size() + " problem(s)");
        System.exit(problems.isEmpty() ? 0 : 1);
    }

    static void checkFiles(Component c, boolean signed, Document pom, List<String> problems) throws Exception {
        String base = c.artifact() + "-" + c.version();
        String packaging = pom == null ? "jar" : text(pom, "packaging");
        List<String> main = new ArrayList<>(List.of(base + ".pom"));
        if (packaging.isEmpty() || packaging.equals("jar")) {
            main.addAll(List.of(base + ".jar", base + "-sources.jar", base + "-javadoc.jar"));
        }
        for (String file : main) {
            List<String> needed = new ArrayList<>(List.of(file, file + ".md5", file + ".sha1"));
            if (signed) {
                needed.add(file + ".asc");
            }
            needed.stream().filter(n -> !c.files().contains(n)).forEach(n -> problems.add(c.artifact() + ": no " + n));
        }
        if (c.version().endsWith("-SNAPSHOT")) {
            problems.add(c.artifact() + ": version " + c.version() + " is a snapshot (Central releases refuse it)");
        }
    }

    static void checkPom(String artifact, Map<String, Document> poms, List<String> problems) throws Exception {
        for (String element : REQUIRED) {
            if (inherited(artifact, element, poms).isEmpty()) {
                problems.add(artifact + ": the POM (or a parent POM in the bundle) has no " + element.replace('/', '>'));
            }
        }
    }

    /** The element's text in the POM of {@code artifact}, else in its parent's (when that is in the bundle). */
    static String inherited(String artifact, String element, Map<String, Document> poms) throws Exception {
        for (String a = artifact; a != null && poms.containsKey(a); ) {
            String value = text(poms.get(a), element);
            if (!value.isEmpty()) {
                return value;
            }
            String parent = text(poms.get(a), "parent/artifactId");
            a = parent.isEmpty() ? null : parent;
        }
        return "";
    }

    static String text(Document pom, String path) throws Exception {
        return XPathFactory.newInstance().newXPath().evaluate("/*[local-name()='project']/" + localNames(path), pom).strip();
    }

    private static String localNames(String path) {
        return String.join("/", List.of(path.split("/")).stream().map(p -> "*[local-name()='" + p + "']").toList());
    }

    static Document parse(byte[] xml) throws Exception {
        DocumentBuilderFactory factory = DocumentBuilderFactory.newInstance();
        factory.setNamespaceAware(true);
        return factory.newDocumentBuilder().parse(new ByteArrayInputStream(xml));
    }

    private static List<String> listAfter(String[] args, String flag) {
        int i = List.of(args).indexOf(flag);
        return i < 0 || i + 1 >= args.length ? List.of() : List.of(args[i + 1].split(","));
    }
}
