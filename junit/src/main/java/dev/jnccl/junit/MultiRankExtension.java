package dev.jnccl.junit;

import dev.jnccl.JncclRuntime;
import java.lang.reflect.Method;
import java.util.stream.Stream;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.TestTemplateInvocationContext;
import org.junit.jupiter.api.extension.TestTemplateInvocationContextProvider;

/**
 * The extension behind {@link MultiRankTest}: checks the annotations, loads jnccl (the backend and
 * the device count name and place the invocations), and gives one invocation per world.
 */
final class MultiRankExtension implements TestTemplateInvocationContextProvider {
    /** jnccl's backend setting: the system property, then the environment variable. */
    private static final String BACKEND_PROPERTY = "jnccl.backend";
    private static final String BACKEND_VARIABLE = "JNCCL_BACKEND";

    @Override
    public boolean supportsTestTemplate(ExtensionContext context) {
        return context.getTestMethod().map(method -> method.isAnnotationPresent(MultiRankTest.class)).orElse(false);
    }

    @Override
    public Stream<TestTemplateInvocationContext> provideTestTemplateInvocationContexts(ExtensionContext context) {
        Method method = context.getRequiredTestMethod();
        Settings settings = Settings.of(method);
        defaultToAuto();
        JncclRuntime runtime = JncclRuntime.query();
        return settings.worlds().stream().map(world -> new WorldInvocation(settings, Plan.of(settings, world, runtime)));
    }

    /**
     * Tests run where they can: without a setting, {@code auto} (the GPUs when there are some, else the
     * host emulation) instead of the library's {@code cuda}. Set before jnccl's libraries load; a
     * setting of the user's is kept.
     */
    private static void defaultToAuto() {
        String property = System.getProperty(BACKEND_PROPERTY);
        String variable = System.getenv(BACKEND_VARIABLE);
        if ((property == null || property.isBlank()) && (variable == null || variable.isBlank())) {
            System.setProperty(BACKEND_PROPERTY, "auto");
        }
    }
}
