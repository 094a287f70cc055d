package dev.jnccl.bindings;

/** Child-JVM entry point for tests: loads the libraries twice and prints what happened each time. */
public final class NativeAccessProbe {
    private NativeAccessProbe() {}

    public static void main(String[] args) {
        for (int attempt = 1; attempt <= 2; attempt++) {
            try {
                LoadedLibraries loaded = NativeLibraries.load();
                System.out.println("LOADED " + loaded.describe());
            } catch (Throwable t) {
                System.out.println("FAILED " + t.getClass().getName() + ": " + t.getMessage());
            }
        }
    }
}
