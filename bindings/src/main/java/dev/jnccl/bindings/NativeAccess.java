package dev.jnccl.bindings;

/**
 * jnccl calls native code through restricted FFM methods, which the JDK allows only to modules
 * with native access enabled. This checks once and says the exact flag instead of leaving the
 * user with the JDK's generic warning (or, under {@code --illegal-native-access=deny}, an
 * {@link IllegalCallerException}).
 */
public final class NativeAccess {
    private static volatile boolean warned;

    private NativeAccess() {}

    /** {@return whether native access is enabled for jnccl's native layer} */
    public static boolean isEnabled() {
        return NativeAccess.class.getModule().isNativeAccessEnabled();
    }

    /**
     * {@return the message telling the user how to enable native access for {@code module}}
     *
     * @param module the module that needs native access
     */
    public static String message(Module module) {
        String where = module.isNamed() ? "module " + module.getName() : "the class path (unnamed module)";
        return "jnccl calls NCCL and the CUDA runtime through the FFM API, and native access is not enabled for "
                + where + ". Add to the java command: "
                + "--enable-native-access=dev.jnccl.bindings,dev.jnccl.core,dev.jnccl.threads,dev.jnccl.mpi"
                + " when jnccl is on the module path, or --enable-native-access=ALL-UNNAMED when it is on the"
                + " class path (an executable jar can say Enable-Native-Access: ALL-UNNAMED in its manifest).";
    }

    /** Logs the message once when native access is not enabled (the JDK's default is to warn and go on). */
    static void warnIfDisabled(org.slf4j.Logger log) {
        if (!isEnabled() && !warned) {
            warned = true;
            log.warn(message(NativeAccess.class.getModule()));
        }
    }

    /** Turns the JDK's refusal of a restricted call into an exception that says what to do. */
    static NativeLibraryException denied(IllegalCallerException e) {
        return new NativeLibraryException(message(NativeAccess.class.getModule()), e);
    }
}
