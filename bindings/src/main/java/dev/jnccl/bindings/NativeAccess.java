package dev.jnccl.bindings;

import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * jnccl calls native code through restricted FFM methods, which the JDK allows only to modules
 * with native access enabled. This checks once, before jnccl's first restricted call, and says the
 * exact flag instead of leaving the user with the JDK's generic warning (or, under
 * {@code --illegal-native-access=deny}, an {@link IllegalCallerException}).
 *
 * <p>The check has to come first: in the JDK's default mode ({@code --illegal-native-access=warn})
 * the first restricted call of a module prints the JDK's warning and then enables native access
 * for that module, so a check made afterwards finds it enabled and never gives jnccl's hint.
 */
public final class NativeAccess {
    /** jnccl's modules that make restricted calls, in the order the flag names them. */
    static final List<String> MODULES = List.of("dev.jnccl.bindings", "dev.jnccl.core", "dev.jnccl.threads",
            "dev.jnccl.mpi");

    private static final Logger LOG = LoggerFactory.getLogger(NativeAccess.class);
    /** Set once native access is known to be allowed (enabled, or granted by the JDK's warn mode). */
    private static volatile boolean allowed;

    private NativeAccess() {}

    /** {@return whether native access is enabled for jnccl's native layer} */
    public static boolean isEnabled() {
        return NativeAccess.class.getModule().isNativeAccessEnabled();
    }

    /**
     * {@return the message telling the user how to enable native access for {@code module}}: the
     * module path form names only jnccl's modules present in {@code module}'s layer (the JVM warns
     * about a flag that names a module it does not have); the class path form is ALL-UNNAMED.
     *
     * @param module the module that needs native access
     */
    public static String message(Module module) {
        if (!module.isNamed()) {
            return message(null, Set.of());
        }
        ModuleLayer layer = module.getLayer() == null ? ModuleLayer.boot() : module.getLayer();
        Set<String> present = layer.modules().stream().map(Module::getName).collect(Collectors.toSet());
        return message(module.getName(), present);
    }

    /**
     * The message for a module named {@code moduleName} (null: the class path) when the modules
     * {@code present} are in its layer.
     */
    static String message(String moduleName, Set<String> present) {
        String start = "jnccl calls NCCL and the CUDA runtime through the FFM API, and native access is not enabled for ";
        if (moduleName == null) {
            return start + "the class path (unnamed module). Add to the java command: --enable-native-access=ALL-UNNAMED"
                    + " (an executable jar can say Enable-Native-Access: ALL-UNNAMED in its manifest).";
        }
        String modules = MODULES.stream().filter(m -> m.equals(moduleName) || present.contains(m))
                .collect(Collectors.joining(","));
        return start + "module " + moduleName + ". Add to the java command: --enable-native-access=" + modules
                + " (jnccl's modules on the module path; a module in a layer of its own gets native access from"
                + " its ModuleLayer.Controller).";
    }

    /**
     * Checks native access before jnccl's first restricted call: nothing when it is enabled; the
     * message as a {@link NativeLibraryException} under {@code --illegal-native-access=deny} (every
     * time, so that each attempt says why); else (the JDK's default: warn and go on) the message
     * logged once. Every jnccl path to a restricted call passes here first ({@link NativeLibraries},
     * {@link Libc}).
     *
     * @throws NativeLibraryException when the JDK refuses native access to jnccl
     */
    static void check() {
        if (allowed) {
            return;
        }
        synchronized (NativeAccess.class) {
            if (allowed) {
                return;
            }
            if (isEnabled()) {
                allowed = true;
                return;
            }
            try {
                // A harmless restricted call: under --illegal-native-access=deny it throws here, before
                // any binding class could be left half-initialised by the same refusal; in warn mode it
                // makes the JDK print its own warning, which the hint below then follows.
                MemorySegment.NULL.reinterpret(1);
            } catch (IllegalCallerException e) {
                throw denied(e);
            }
            allowed = true;
            Notices.warn(LOG, message(NativeAccess.class.getModule()));
        }
    }

    /** Turns the JDK's refusal of a restricted call into an exception that says what to do. */
    static NativeLibraryException denied(IllegalCallerException e) {
        return new NativeLibraryException(message(NativeAccess.class.getModule()), e);
    }
}
