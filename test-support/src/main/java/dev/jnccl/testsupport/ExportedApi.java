package dev.jnccl.testsupport;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.lang.module.ModuleDescriptor;
import java.lang.reflect.Constructor;
import java.lang.reflect.Executable;
import java.lang.reflect.Field;
import java.lang.reflect.GenericArrayType;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.RecordComponent;
import java.lang.reflect.Type;
import java.lang.reflect.TypeVariable;
import java.lang.reflect.WildcardType;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.jar.JarFile;
import java.util.stream.Stream;

/**
 * Checks a module's API surface by reflection: which public or protected signatures of the packages
 * its {@code module-info} exports to everyone mention types from packages that must stay out of
 * the API (jnccl's bindings and internals). It complements javac's {@code -Xlint:exports}, which
 * only warns: a test built on this fails.
 *
 * <p>Tests run on the class path, so the module descriptor and the classes are read from where the
 * module's classes were loaded (a {@code target/classes} directory or a jar).
 */
public final class ExportedApi {
    private ExportedApi() {}

    /**
     * The packages that the module containing {@code anyClass} exports without a {@code to} clause.
     *
     * @throws IllegalStateException when no {@code module-info.class} lies next to that class
     */
    public static Set<String> unqualifiedExports(Class<?> anyClass) {
        Path root = root(anyClass);
        try (InputStream in = open(root, "module-info.class")) {
            Set<String> packages = new TreeSet<>();
            for (ModuleDescriptor.Exports export : ModuleDescriptor.read(in).exports()) {
                if (!export.isQualified()) {
                    packages.add(export.source());
                }
            }
            return packages;
        } catch (IOException e) {
            throw new UncheckedIOException("reading module-info.class under " + root, e);
        }
    }

    /**
     * The modules that the module containing {@code anyClass} exports {@code pkg} to (its
     * {@code to} clause); empty when the export is unqualified or absent.
     *
     * @param anyClass a class of the module
     * @param pkg      the package
     * @return the target modules
     */
    public static Set<String> exportTargets(Class<?> anyClass, String pkg) {
        Path root = root(anyClass);
        try (InputStream in = open(root, "module-info.class")) {
            Set<String> targets = new TreeSet<>();
            for (ModuleDescriptor.Exports export : ModuleDescriptor.read(in).exports()) {
                if (export.source().equals(pkg)) {
                    targets.addAll(export.targets());
                }
            }
            return targets;
        } catch (IOException e) {
            throw new UncheckedIOException("reading module-info.class under " + root, e);
        }
    }

    /**
     * Every public or protected signature element of the public types in the unqualified exports of
     * {@code anyClass}'s module that names a type whose fully qualified name starts with one of
     * {@code forbiddenPrefixes}. See {@link #leaks(Class, Collection, String...)}.
     */
    public static Report leaksFromExports(Class<?> anyClass, String... forbiddenPrefixes) {
        return leaks(anyClass, unqualifiedExports(anyClass), forbiddenPrefixes);
    }

    /**
     * Every public or protected signature element (supertypes, type parameters, record components,
     * fields, constructor and method parameters, results and exceptions, with generic arguments,
     * bounds and array elements) of the public types in {@code packages}, which are read from where
     * {@code anyClass} was loaded, that names a type whose fully qualified name starts with one of
     * {@code forbiddenPrefixes}.
     */
    public static Report leaks(Class<?> anyClass, Collection<String> packages, String... forbiddenPrefixes) {
        Path root = root(anyClass);
        List<String> leaks = new ArrayList<>();
        int types = 0;
        for (String pkg : packages) {
            for (String className : classNames(root, pkg)) {
                Class<?> type;
                try {
                    type = Class.forName(className, false, anyClass.getClassLoader());
                } catch (ClassNotFoundException e) {
                    throw new IllegalStateException("listed but not loadable: " + className, e);
                }
                if (!isApi(type)) {
                    continue;
                }
                types++;
                new Scan(type, forbiddenPrefixes, leaks).run();
            }
        }
        return new Report(types, leaks);
    }

    /**
     * The public types (nested ones included) of the unqualified exports of {@code anyClass}'s
     * module, read from where {@code anyClass} was loaded.
     *
     * @param anyClass a class of the module
     * @return the types, in package and name order
     */
    public static List<Class<?>> publicTypes(Class<?> anyClass) {
        Path root = root(anyClass);
        List<Class<?>> types = new ArrayList<>();
        for (String pkg : unqualifiedExports(anyClass)) {
            for (String className : classNames(root, pkg)) {
                try {
                    Class<?> type = Class.forName(className, false, anyClass.getClassLoader());
                    if (isApi(type)) {
                        types.add(type);
                    }
                } catch (ClassNotFoundException e) {
                    throw new IllegalStateException("listed but not loadable: " + className, e);
                }
            }
        }
        return types;
    }

    /**
     * What {@link #leaks} found.
     *
     * @param typesExamined public types examined (nested ones included)
     * @param leaks         one line per signature element that names a forbidden type, as
     *                      "owner.where: type"
     */
    public record Report(int typesExamined, List<String> leaks) {}

    /** A public type reachable from outside: public, and every enclosing type public too. */
    private static boolean isApi(Class<?> type) {
        for (Class<?> c = type; c != null; c = c.getDeclaringClass()) {
            if (!Modifier.isPublic(c.getModifiers()) || c.isSynthetic() || c.isAnonymousClass()) {
                return false;
            }
        }
        return true;
    }

    /** Walks one type's signature, collecting forbidden type names. */
    private static final class Scan {
        private final Class<?> owner;
        private final String[] forbidden;
        private final List<String> leaks;

        Scan(Class<?> owner, String[] forbidden, List<String> leaks) {
            this.owner = owner;
            this.forbidden = forbidden;
            this.leaks = leaks;
        }

        void run() {
            check("extends", owner.getGenericSuperclass());
            for (Type t : owner.getGenericInterfaces()) {
                check("implements", t);
            }
            for (TypeVariable<?> v : owner.getTypeParameters()) {
                check("type parameter " + v.getName(), v);
            }
            if (owner.isRecord()) {
                for (RecordComponent component : owner.getRecordComponents()) {
                    check("component " + component.getName(), component.getGenericType());
                }
            }
            for (Field field : owner.getDeclaredFields()) {
                if (visible(field.getModifiers()) && !field.isSynthetic()) {
                    check(field.getName(), field.getGenericType());
                }
            }
            for (Constructor<?> constructor : owner.getDeclaredConstructors()) {
                if (visible(constructor.getModifiers()) && !constructor.isSynthetic()) {
                    executable("<init>", constructor);
                }
            }
            for (Method method : owner.getDeclaredMethods()) {
                if (visible(method.getModifiers()) && !method.isSynthetic() && !method.isBridge()) {
                    executable(method.getName(), method);
                    check(method.getName() + " returns", method.getGenericReturnType());
                }
            }
        }

        private void executable(String name, Executable executable) {
            for (Type t : executable.getGenericParameterTypes()) {
                check(name + " parameter", t);
            }
            for (Type t : executable.getGenericExceptionTypes()) {
                check(name + " throws", t);
            }
            for (TypeVariable<?> v : executable.getTypeParameters()) {
                check(name + " type parameter " + v.getName(), v);
            }
        }

        private void check(String where, Type type) {
            walk(where, type, new HashSet<>());
        }

        private void walk(String where, Type type, Set<TypeVariable<?>> seen) {
            switch (type) {
                case null -> { }
                case Class<?> c -> {
                    Class<?> element = c;
                    while (element.isArray()) {
                        element = element.getComponentType();
                    }
                    for (String prefix : forbidden) {
                        if (element.getName().startsWith(prefix)) {
                            leaks.add(owner.getName() + "." + where + ": " + element.getName());
                        }
                    }
                }
                case ParameterizedType p -> {
                    walk(where, p.getRawType(), seen);
                    walk(where, p.getOwnerType(), seen);
                    for (Type argument : p.getActualTypeArguments()) {
                        walk(where, argument, seen);
                    }
                }
                case GenericArrayType a -> walk(where, a.getGenericComponentType(), seen);
                case WildcardType w -> {
                    for (Type bound : w.getUpperBounds()) {
                        walk(where, bound, seen);
                    }
                    for (Type bound : w.getLowerBounds()) {
                        walk(where, bound, seen);
                    }
                }
                case TypeVariable<?> v -> {
                    if (seen.add(v)) {
                        for (Type bound : v.getBounds()) {
                            walk(where, bound, seen);
                        }
                    }
                }
                default -> throw new IllegalStateException("unknown kind of type " + type.getClass());
            }
        }

        private static boolean visible(int modifiers) {
            return Modifier.isPublic(modifiers) || Modifier.isProtected(modifiers);
        }
    }

    // ------------------------------------------------------------------ class files

    /** The directory or jar that {@code anyClass} was loaded from. */
    private static Path root(Class<?> anyClass) {
        try {
            return Path.of(anyClass.getProtectionDomain().getCodeSource().getLocation().toURI());
        } catch (URISyntaxException | NullPointerException e) {
            throw new IllegalStateException("cannot tell where " + anyClass + " was loaded from", e);
        }
    }

    private static InputStream open(Path root, String entry) throws IOException {
        if (Files.isDirectory(root)) {
            Path file = root.resolve(entry);
            if (!Files.exists(file)) {
                throw new IllegalStateException("no " + entry + " in " + root);
            }
            return Files.newInputStream(file);
        }
        JarFile jar = new JarFile(root.toFile());
        var jarEntry = jar.getJarEntry(entry);
        if (jarEntry == null) {
            jar.close();
            throw new IllegalStateException("no " + entry + " in " + root);
        }
        // Closing the returned stream must close the jar too.
        InputStream in = jar.getInputStream(jarEntry);
        return new java.io.FilterInputStream(in) {
            @Override
            public void close() throws IOException {
                try {
                    super.close();
                } finally {
                    jar.close();
                }
            }
        };
    }

    /** Binary names of the classes directly in {@code pkg} (nested ones included, module-info not). */
    private static List<String> classNames(Path root, String pkg) {
        String dir = pkg.replace('.', '/') + "/";
        List<String> entries = new ArrayList<>();
        try {
            if (Files.isDirectory(root)) {
                Path folder = root.resolve(dir);
                if (Files.isDirectory(folder)) {
                    try (Stream<Path> files = Files.list(folder)) {
                        files.map(f -> dir + f.getFileName()).forEach(entries::add);
                    }
                }
            } else {
                try (JarFile jar = new JarFile(root.toFile())) {
                    jar.stream().map(e -> e.getName())
                            .filter(n -> n.startsWith(dir) && n.indexOf('/', dir.length()) < 0)
                            .forEach(entries::add);
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException("listing " + dir + " under " + root, e);
        }
        List<String> names = new ArrayList<>();
        for (String entry : entries) {
            if (entry.endsWith(".class") && !entry.endsWith("package-info.class")) {
                names.add(entry.substring(0, entry.length() - ".class".length()).replace('/', '.'));
            }
        }
        names.sort(null);
        return names;
    }
}
