package dev.jnccl.junit;

import dev.jnccl.Communicator;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsPack;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalInt;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.concurrent.locks.ReentrantLock;
import java.util.stream.Stream;
import org.junit.jupiter.api.Assumptions;
import org.opentest4j.AssertionFailedError;

/**
 * One invocation of a {@link MultiRankTest}: takes the JVM's multi-rank lock, sets the plan's
 * environment, runs the method on every rank of a threads-mode pack, waits at most the deadline, and
 * turns what the ranks did into the invocation's outcome ({@link Outcome}).
 */
final class PackRun {
    /**
     * Multi-rank tests run one at a time in a JVM, in arrival order: each uses every device it is
     * placed on, and the emulation's fault hooks are process-wide.
     */
    private static final ReentrantLock ONE_AT_A_TIME = new ReentrantLock(true);
    /** The longest wait for the multi-rank tests ahead of this one (under parallel execution). */
    private static final Duration LOCK_WAIT = Duration.ofMinutes(30);
    private static volatile String holder = "none";

    private final Settings settings;
    private final Plan plan;
    private final Method method;
    private final Object target;
    private final List<Object> arguments;
    private final AtomicReferenceArray<Communicator> communicators;
    private final AtomicReferenceArray<Throwable> errors;
    private final AtomicReferenceArray<RankFailure> thrown;
    private final AtomicInteger returned = new AtomicInteger();

    private PackRun(Settings settings, Plan plan, Method method, Object target, List<Object> arguments) {
        this.settings = settings;
        this.plan = plan;
        this.method = method;
        this.target = target;
        this.arguments = arguments;
        this.communicators = new AtomicReferenceArray<>(plan.world());
        this.errors = new AtomicReferenceArray<>(plan.world());
        this.thrown = new AtomicReferenceArray<>(plan.world());
    }

    /** Runs one world of {@code method}, or skips it (with the plan's reason). */
    static void run(Settings settings, Plan plan, Method method, Object target, List<Object> arguments)
            throws Throwable {
        Assumptions.assumeTrue(plan.skip() == null, plan::skip);
        new PackRun(settings, plan, method, target, arguments).runAlone();
    }

    private void runAlone() throws Throwable {
        if (!ONE_AT_A_TIME.tryLock(LOCK_WAIT.toMillis(), TimeUnit.MILLISECONDS)) {
            throw new AssertionFailedError(plan.displayName() + " of " + settings.test() + " waited " + LOCK_WAIT
                    + " for the multi-rank tests before it (they run one at a time; running: " + holder + ")");
        }
        holder = plan.displayName() + " of " + settings.test();
        try (AutoCloseable _ = environment(plan.environment())) {
            runPack();
        } finally {
            holder = "none";
            ONE_AT_A_TIME.unlock();
        }
    }

    /** The plan's variables for the pack's life; nothing native when there are none. */
    private static AutoCloseable environment(Map<String, String> variables) {
        return variables.isEmpty() ? () -> { } : ProcessEnv.set(variables);
    }

    private void runPack() throws Throwable {
        ThreadsPack pack = ThreadsCommunicators.launch(plan.world(),
                settings.options().withDevices(plan.deviceOfRank()), this::rank);
        try {
            boolean finished;
            Throwable joined = null;
            try {
                finished = pack.join(settings.timeout());
            } catch (InterruptedException e) {
                pack.close(); // aborts the ranks, bounded
                Thread.currentThread().interrupt();
                throw e;
            } catch (RuntimeException | Error e) {
                finished = true;
                joined = e;
            }
            if (!finished) {
                throw deadlinePassed(pack);
            }
            Outcome.of(settings.test(), plan, errors, returned.get(), joined, culprit(pack), closeErrors()).check();
        } finally {
            pack.close();
        }
    }

    /** One rank's body: the test method with this rank's communicator and {@link RankInfo}. */
    private void rank(Communicator comm) {
        int rank = comm.rank();
        communicators.set(rank, comm);
        RankInfo info = new RankInfo(rank, plan.world(), comm.device(), plan.backend());
        Object[] args = arguments.toArray();
        Class<?>[] types = method.getParameterTypes();
        for (int i = 0; i < types.length; i++) {
            if (types[i] == Communicator.class) {
                args[i] = comm;
            } else if (types[i] == RankInfo.class) {
                args[i] = info;
            }
        }
        try {
            method.invoke(target, args);
            returned.incrementAndGet();
        } catch (InvocationTargetException e) {
            throw failed(rank, e.getCause());
        } catch (IllegalAccessException e) {
            throw failed(rank, new IllegalStateException("rank " + rank + " cannot call " + method, e));
        }
    }

    private RankFailure failed(int rank, Throwable error) {
        errors.set(rank, error);
        RankFailure failure = new RankFailure(rank, error);
        thrown.set(rank, failure);
        return failure;
    }

    /**
     * What a rank's thread throws to the pack for the test method's exception: the pack attaches the
     * other ranks' errors (and a failed close's) to what it rethrows, and that must not change the
     * user's own exception. {@link Outcome} attaches each error once, to the invocation's failure.
     */
    static final class RankFailure extends RuntimeException {
        private static final long serialVersionUID = 1L;
        private final int rank;

        RankFailure(int rank, Throwable error) {
            super("rank " + rank + " threw " + error, error, true, false);
            this.rank = rank;
        }

        int rank() {
            return rank;
        }
    }

    /**
     * The rank to blame when every rank's error is the pack's release: the injected fault's rank, else
     * the rank the pack reported first (a peer that noticed the failure may have reported it sooner).
     */
    private OptionalInt culprit(ThreadsPack pack) {
        return settings.fault().map(fault -> OptionalInt.of(fault.rank())).orElseGet(pack::failedRank);
    }

    /** Errors the pack attached to a rank's {@link RankFailure} other than the other ranks': its close's. */
    private List<Throwable> closeErrors() {
        List<Throwable> found = new ArrayList<>();
        for (int rank = 0; rank < plan.world(); rank++) {
            RankFailure failure = thrown.get(rank);
            if (failure != null) {
                Stream.of(failure.getSuppressed()).filter(e -> !(e instanceof RankFailure)).forEach(found::add);
            }
        }
        return found;
    }

    /**
     * The deadline's failure: what every rank had executed (its flight recorder) and where every
     * jnccl thread was, taken before the pack is aborted; the ranks' errors from the abort attached.
     */
    private AssertionFailedError deadlinePassed(ThreadsPack pack) {
        StringBuilder report = new StringBuilder(plan.displayName()).append(" of ").append(settings.test())
                .append(" did not finish within ").append(settings.timeout().toSeconds())
                .append(" s (@MultiRankTest timeoutSeconds): the pack was aborted.");
        for (int rank = 0; rank < plan.world(); rank++) {
            Communicator comm = communicators.get(rank);
            report.append("\nrank ").append(rank).append(comm == null ? ": no communicator (still in its init)"
                    : " recent transactions:\n  " + comm.recentTransactions().replace("\n", "\n  "));
        }
        report.append("\njnccl threads:");
        Threads.stacks("jnccl-").forEach(stack -> report.append("\n").append(stack));
        pack.close();
        AssertionFailedError failure = new AssertionFailedError(report.toString());
        for (int rank = 0; rank < plan.world(); rank++) {
            Throwable error = errors.get(rank);
            if (error != null) {
                failure.addSuppressed(error);
            }
        }
        return failure;
    }
}
