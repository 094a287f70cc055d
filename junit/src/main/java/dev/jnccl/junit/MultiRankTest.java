package dev.jnccl.junit;

import dev.jnccl.threads.ThreadsOptions;
import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import java.util.function.Supplier;
import org.junit.jupiter.api.TestTemplate;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Runs the annotated method as every rank of a threads-mode pack, once per world size: each rank's
 * thread calls the method with its own {@link dev.jnccl.Communicator} and {@link RankInfo} (declare
 * either or both as parameters; JUnit's own parameters such as {@code TestInfo} are resolved once and
 * shared). Each world is one test invocation, named with the world and the backend, as
 * {@code world 2 [host]}.
 *
 * <pre>{@code
 * @MultiRankTest(worlds = {1, 2, 4})
 * void sums(Communicator comm, RankInfo rank) { ... }
 * }</pre>
 *
 * <p><b>Outcome.</b> The ranks' bodies decide: the invocation passes when every rank's body returns
 * normally, also when they caught an abort of the pack and returned. When ranks throw, one failure
 * names every failing rank with its exception and the world (the first failing rank's exception is
 * the cause); the other ranks are released by the pack (their calls throw
 * {@code CommunicatorAbortedException}) and their errors are attached as suppressed exceptions. A rank
 * body that aborts with an assumption skips the invocation.
 *
 * <p><b>Deadline.</b> An invocation still running after {@link #timeoutSeconds()} is ended: the pack
 * is aborted (its threads are daemons and are waited for a bounded time) and the failure carries
 * every rank's recent transactions (its flight recorder) and every jnccl thread's stack.
 *
 * <p><b>One at a time.</b> Multi-rank tests take every device of the machine, so they run one at a
 * time in a JVM, in the order they asked (a fair lock), also under JUnit's parallel execution: other
 * tests still run beside them. {@code @BeforeEach} and {@code @AfterEach} methods run once per
 * invocation on JUnit's thread, not per rank.
 *
 * <p>Without a {@code jnccl.backend} setting (system property or {@code JNCCL_BACKEND}) the extension
 * sets the property to {@code auto} before jnccl's libraries load: the GPUs when there are some, else
 * the host emulation. {@code -Djnccl.backend=host} runs everything on the emulation.
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
@Documented
@TestTemplate
@ExtendWith(MultiRankExtension.class)
// The extension and the default options are this annotation's values, which JUnit and the extension
// read reflectively; a user's code never names them, so they stay out of the API.
@SuppressWarnings("exports")
public @interface MultiRankTest {
    /**
     * The world sizes, each one invocation, in this order: 1 to 1024 ranks each, no repeats.
     *
     * @return the world sizes
     */
    int[] worlds() default {2};

    /**
     * How long one invocation may run, in seconds, before the pack is aborted and the test fails
     * (1 to 86400).
     *
     * @return the per-invocation deadline in seconds
     */
    long timeoutSeconds() default 60;

    /**
     * Where the ranks run; see {@link Placement}.
     *
     * @return the placement
     */
    Placement placement() default Placement.AUTO;

    /**
     * The pack's options (communicator options, watchdog, transports): a class with a no-argument
     * constructor whose {@code get()} returns them; default {@link ThreadsOptions#defaults()}. The
     * placement decides the devices, whatever {@link ThreadsOptions#devices()} says.
     *
     * @return the class that supplies the options
     */
    Class<? extends Supplier<ThreadsOptions>> options() default DefaultOptions.class;
}
