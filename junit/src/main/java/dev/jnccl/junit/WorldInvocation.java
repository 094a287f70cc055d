package dev.jnccl.junit;

import dev.jnccl.Communicator;
import java.lang.reflect.InaccessibleObjectException;
import java.lang.reflect.Method;
import java.util.List;
import org.junit.jupiter.api.extension.Extension;
import org.junit.jupiter.api.extension.ExtensionConfigurationException;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.InvocationInterceptor;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;
import org.junit.jupiter.api.extension.ReflectiveInvocationContext;
import org.junit.jupiter.api.extension.TestTemplateInvocationContext;

/**
 * One world of a {@link MultiRankTest}: its display name, the {@link Communicator} and
 * {@link RankInfo} parameters (placeholders on JUnit's thread, each rank's own on its thread), and
 * the interception that runs the method as the pack instead of once.
 */
final class WorldInvocation implements TestTemplateInvocationContext, ParameterResolver, InvocationInterceptor {
    private final Settings settings;
    private final Plan plan;

    WorldInvocation(Settings settings, Plan plan) {
        this.settings = settings;
        this.plan = plan;
    }

    @Override
    public String getDisplayName(int invocationIndex) {
        return plan.displayName();
    }

    @Override
    public List<Extension> getAdditionalExtensions() {
        return List.of(this);
    }

    @Override
    public boolean supportsParameter(ParameterContext parameter, ExtensionContext context) {
        Class<?> type = parameter.getParameter().getType();
        return (type == Communicator.class || type == RankInfo.class)
                && parameter.getDeclaringExecutable().isAnnotationPresent(MultiRankTest.class);
    }

    /** Null on JUnit's thread: {@link PackRun} puts each rank's own value in its place. */
    @Override
    public Object resolveParameter(ParameterContext parameter, ExtensionContext context) {
        return null;
    }

    @Override
    public void interceptTestTemplateMethod(Invocation<Void> invocation, ReflectiveInvocationContext<Method> call,
                                            ExtensionContext context) throws Throwable {
        invocation.skip(); // the ranks call the method, each with its own arguments
        Method method = call.getExecutable();
        try {
            method.setAccessible(true);
        } catch (InaccessibleObjectException e) {
            throw new ExtensionConfigurationException("@MultiRankTest on " + settings.test() + ": jnccl-junit cannot"
                    + " call it; on the module path, open its package " + method.getDeclaringClass().getPackageName()
                    + " to dev.jnccl.junit (as to org.junit.platform.commons)", e);
        }
        PackRun.run(settings, plan, method, call.getTarget().orElse(null), call.getArguments());
    }
}
