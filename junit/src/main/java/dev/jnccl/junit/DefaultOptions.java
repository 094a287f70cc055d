package dev.jnccl.junit;

import dev.jnccl.threads.ThreadsOptions;
import java.util.function.Supplier;

/** {@link MultiRankTest#options()}'s default: {@link ThreadsOptions#defaults()}. */
final class DefaultOptions implements Supplier<ThreadsOptions> {
    @Override
    public ThreadsOptions get() {
        return ThreadsOptions.defaults();
    }
}
