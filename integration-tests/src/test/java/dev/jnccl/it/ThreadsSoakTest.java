package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeFalse;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.AllToAllSchedule;
import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorAbortedException;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.DType;
import dev.jnccl.Diagnosis;
import dev.jnccl.RankSummary;
import dev.jnccl.DeviceTensor;
import dev.jnccl.JncclInterruptedException;
import dev.jnccl.JncclRuntime;
import dev.jnccl.NcclException;
import dev.jnccl.ReduceOp;
import dev.jnccl.Transaction;
import dev.jnccl.cuda.CudaEvent;
import dev.jnccl.cuda.CudaStream;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.testsupport.ChildJvm;
import dev.jnccl.testsupport.NativeEnv;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import dev.jnccl.threads.ThreadsPack;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.function.Consumer;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;
import org.opentest4j.AssertionFailedError;

/**
 * A randomized, seeded, long-running test of threads mode. Each round launches a pack of 3 or 4
 * ranks with random transports (memcpy all-gather and memcpy send/recv on or off) and a random
 * {@code maxLead}, and runs a random sequence of operations that every rank derives from the same
 * round seed: transactions mixing reduce-scatters, all-reduces, all-gathers (in and out of place),
 * broadcasts, send/recv rings (to the rank itself, too), all-to-alls and destructive all-to-alls of
 * random dtypes and sizes; the convenience operations; host gathers and barriers; splits into random
 * colors with work on each child, which is then closed. Every result is compared element by element
 * with a Java reference ({@link Data}, {@link Verify}) on random data.
 *
 * <p>About four rounds in ten inject a fault: a rank throws in the middle of its work; a rank is
 * interrupted by another thread while it waits in a barrier or in {@code await}; the host
 * emulation's {@code JNCCL_HOST_FAULT=hang} or {@code fail} hits a rank at its k-th NCCL operation
 * (host backend only; watchdog 1-2 s); a rank never arrives at a barrier (it waits on a latch until
 * the pack's failure interrupts it; watchdog 1 s); a rank lags in user code at an all-reduce the others
 * are in, or returns from its work there (watchdog 1-2 s); with the consistency checks on, a rank
 * all-reduces one element more than the others; a lagging rank whose ncclCommAbort never returns
 * ({@code JNCCL_HOST_FAULT=hang-abort}, host only, in a child JVM: its blocked thread stays for good,
 * and the abort is abandoned after the close timeout of 5 s). The last four have their verdict checked:
 * the same first line (the consistency check's verdict inside the message) in every exception, naming
 * the faulty rank and the value (the transaction it never reached or the count it left after, as its
 * summary says; the two counts of the all-reduce). Then {@link ThreadsPack#join()} must throw within
 * the watchdog plus 10 s, every rank's exception must be a {@link CommunicatorAbortedException}
 * naming the failed rank (the faulty rank's own: the injected exception, or one that says it was
 * interrupted), and no pack thread may survive. Over the whole run the number of open file
 * descriptors, of threads, and of the emulation's shared-memory segments ({@code /dev/shm/jnccl-*},
 * mapped or named) must not grow.
 *
 * <p>Duration and replay: rounds run until {@code -Djnccl.soak.minutes=N} (or {@code -Djnccl.soak.seconds=N})
 * have passed (default 20 s, what CI runs); the end prints the seed and the figures (rounds by fault,
 * transactions, verdicts checked, aborts abandoned); {@code -Djnccl.soak.faults=LAG,MISMATCH} draws only
 * those faults;
 * {@code -Djnccl.soak.seed=S} replays a run (the seed and each round's plan are printed at the start
 * of each round, and every failure names them); {@code -Djnccl.soak.round=R} with the seed replays
 * round R alone. A long run:
 * {@code ./mvnw -B -pl integration-tests -am verify -Dtest=ThreadsSoakTest -Djnccl.soak.minutes=15
 * -Dsurefire.failIfNoSpecifiedTests=false}.
 */
class ThreadsSoakTest {
    /** How long the run lasts: {@code -Djnccl.soak.minutes=N}, else {@code -Djnccl.soak.seconds=N} (default 20 s, CI's). */
    private static final long SECONDS = Long.getLong("jnccl.soak.minutes") != null
            ? TimeUnit.MINUTES.toSeconds(Long.getLong("jnccl.soak.minutes")) : Long.getLong("jnccl.soak.seconds", 20);
    private static final Long FIXED_SEED = Long.getLong("jnccl.soak.seed");
    private static final Integer ONLY_ROUND = Integer.getInteger("jnccl.soak.round");
    /** {@code -Djnccl.soak.faults=LAG,MISMATCH}: only these faults are drawn (a seed replays with the same setting). */
    private static final String ONLY_FAULTS = System.getProperty("jnccl.soak.faults", "");
    /** Watchdog of rounds whose failures come from the pack itself (long: a stuck round still ends). */
    private static final Duration LONG_WATCHDOG = Duration.ofSeconds(30);
    /** How long join() may take beyond the watchdog (or the injection's delay) in a faulty round. */
    private static final Duration JOIN_SLACK = Duration.ofSeconds(10);
    /** The bound of a clean round (a few seconds normally). */
    private static final Duration CLEAN_BOUND = Duration.ofSeconds(120);
    /** How long a rank held back by a fault waits on its latch before it goes on anyway. */
    private static final long LATCH_SECONDS = 60;
    /** The close timeout of a round whose abort hangs: also the abort's bound (at least 5 s). */
    private static final Duration HANG_ABORT_CLOSE = Duration.ofSeconds(5);
    /** The transactions and convenience operations the ranks ran, summed over ranks (the figures at the end). */
    private static final AtomicLong TRANSACTIONS = new AtomicLong();
    /** The HANG_ABORT rounds whose abort did hang (and was abandoned). */
    private static final AtomicLong ABORTS_HUNG = new AtomicLong();
    /** The exceptions whose verdict was checked (rank number and value in its message). */
    private static final AtomicLong VERDICTS = new AtomicLong();

    // ================================================================== the plan of a round

    enum Kind { REDUCE_SCATTER, ALL_REDUCE, ALL_GATHER, ALL_GATHER_IN_PLACE, BROADCAST, RING, ALL_TO_ALL, DESTRUCTIVE_ALL_TO_ALL }

    /** The kinds with a convenience method on {@link Communicator}. */
    private static final List<Kind> CONVENIENT = List.of(Kind.REDUCE_SCATTER, Kind.ALL_REDUCE, Kind.BROADCAST, Kind.ALL_TO_ALL);
    private static final List<DType> REDUCED = List.of(DType.FP32, DType.BF16, DType.INT32);

    /**
     * One command. {@code unit}: elements of a reduce-scatter shard, an all-reduced or broadcast
     * tensor, an all-gather shard, a ring message (plus 3 per sending rank) or an all-to-all slot;
     * {@code param}: the broadcast root, the ring's shift, or the convenience reduce-scatter's form.
     */
    record Cmd(Kind kind, DType dtype, ReduceOp op, int unit, int param) {
        @Override
        public String toString() {
            return kind + "(" + dtype + (isReduction() ? " " + op : "") + " x" + unit
                    + (kind == Kind.BROADCAST ? " root " + param : kind == Kind.RING ? " shift " + param : "") + ")";
        }

        boolean isReduction() {
            return kind == Kind.REDUCE_SCATTER || kind == Kind.ALL_REDUCE;
        }

        /** Always one NCCL operation (whatever the transports): what JNCCL_HOST_FAULT_AT can count on. */
        boolean alwaysNccl() {
            return isReduction() || kind == Kind.BROADCAST;
        }
    }

    sealed interface Op permits Tx, Convenience, Host, Split {}

    /** A transaction; {@code fromEvent}: begun after a ready event (else after the stream); {@code signal}: awaited through its signal (else waitOnComms). */
    record Tx(List<Cmd> commands, boolean fromEvent, boolean signal) implements Op {
        @Override
        public String toString() {
            return "tx" + (fromEvent ? "[event" : "[stream") + (signal ? ",signal]" : ",waitOnComms]") + commands;
        }
    }

    record Convenience(Cmd command) implements Op {
        @Override
        public String toString() {
            return "conv " + command;
        }
    }

    enum HostKind { BARRIER, GATHER, ALL_GATHER, ALL_GATHER_LONGS }

    record Host(HostKind kind, int root) implements Op {
        @Override
        public String toString() {
            return kind == HostKind.GATHER ? "host GATHER root " + root : "host " + kind;
        }
    }

    /** A split: each rank's color (negative: none) and key, and the work of each color's child. */
    record Split(int[] colors, int[] keys, Map<Integer, List<Op>> work) implements Op {
        List<Integer> members(int color) {
            List<Integer> members = new ArrayList<>();
            for (int r = 0; r < colors.length; r++) {
                if (color >= 0 && colors[r] == color) {
                    members.add(r);
                }
            }
            members.sort((a, b) -> keys[a] != keys[b] ? Integer.compare(keys[a], keys[b]) : Integer.compare(a, b));
            return members;
        }

        @Override
        public String toString() {
            return "split colors " + Arrays.toString(colors) + " keys " + Arrays.toString(keys) + " work " + work;
        }
    }

    /**
     * The faults. LAG: a rank stays in user code at an all-reduce the others are in (short watchdog);
     * LEAVES_EARLY: a rank returns from its work there; MISMATCH: with the consistency checks on, a rank
     * all-reduces one element more; HANG_ABORT: LAG while the emulation's ncclCommAbort of another rank
     * never returns (in a child JVM: that thread stays blocked for good). Each has its verdict checked.
     */
    enum Fault {
        THROW, INTERRUPT_IN_BARRIER, INTERRUPT_IN_AWAIT, NEVER_ARRIVES, HOST_HANG, HOST_FAIL, LAG, LEAVES_EARLY, MISMATCH,
        HANG_ABORT;

        /** Only the host emulation can inject it. */
        boolean hostOnly() {
            return this == HOST_HANG || this == HOST_FAIL || this == HANG_ABORT;
        }

        /** The faulty rank holds back on a latch at its operation until the pack's failure interrupts it. */
        boolean holdsBack() {
            return this == NEVER_ARRIVES || this == LAG || this == HANG_ABORT;
        }
    }

    /**
     * A fault: {@code rank} is the faulty rank, {@code at} the index of the operation where it hits
     * (for the host faults: the 1-based NCCL operation of that rank), {@code late} the rank that
     * holds back so that the faulty rank really waits (interrupt faults), {@code delayMillis} how
     * long after the faulty rank starts waiting it is interrupted.
     */
    record Injected(Fault kind, int rank, int at, int late, int delayMillis, Duration watchdog) {
        boolean hostFault() {
            return kind == Fault.HOST_HANG || kind == Fault.HOST_FAIL;
        }

        boolean shortWatchdog() {
            return watchdog.compareTo(LONG_WATCHDOG) < 0;
        }

        @Override
        public String toString() {
            return kind + " on rank " + rank + (hostFault() ? " at its NCCL operation " + at : " at operation " + at)
                    + (kind == Fault.HANG_ABORT ? ", the abort of rank " + late + " hangs"
                    : late >= 0 ? ", rank " + late + " late, interrupt after " + delayMillis + " ms" : "")
                    + ", watchdog " + watchdog.toMillis() + " ms";
        }
    }

    record Round(long runSeed, int index, long seed, int world, boolean memcpyAllGather, boolean memcpySendRecv,
                 int maxLead, List<Op> ops, Injected fault) {
        ThreadsOptions options() {
            Duration watchdog = fault == null ? LONG_WATCHDOG : fault.watchdog();
            CommunicatorOptions communicator = CommunicatorOptions.defaults().withWatchdog(watchdog)
                    .withConsistencyChecks(fault != null && fault.kind() == Fault.MISMATCH);
            if (fault != null && fault.kind() == Fault.HANG_ABORT) {
                communicator = communicator.withCloseTimeout(HANG_ABORT_CLOSE);
            }
            return ThreadsOptions.defaults().withMemcpyAllGather(memcpyAllGather).withMemcpySendRecv(memcpySendRecv)
                    .withMaxLead(maxLead).withCommunicator(communicator);
        }

        /** How failures name the round: enough to replay it. */
        String where() {
            return "soak seed " + runSeed + " round " + index + " (-Djnccl.soak.seed=" + runSeed + " -Djnccl.soak.round="
                    + index + (ONLY_FAULTS.isBlank() ? "" : " -Djnccl.soak.faults=" + ONLY_FAULTS) + ")";
        }

        @Override
        public String toString() {
            return where() + ": world " + world + ", allGather " + (memcpyAllGather ? "memcpy" : "nccl") + ", send/recv "
                    + (memcpySendRecv ? "memcpy" : "nccl") + ", maxLead " + maxLead + ", "
                    + (fault == null ? "no fault" : "fault " + fault) + "\n    ops " + ops;
        }

        /** The plan of round {@code index} of the run with {@code runSeed}: the same on every rank. */
        static Round plan(long runSeed, int index, boolean host, List<DType> dtypes) {
            long seed = Data.seed(runSeed, index, "soak round");
            SplittableRandom random = new SplittableRandom(seed);
            int world = 3 + random.nextInt(2);
            boolean memcpyAllGather = random.nextBoolean();
            boolean memcpySendRecv = random.nextBoolean();
            int maxLead = 1 + random.nextInt(8);
            Fault kind = null;
            if (random.nextInt(10) < 4) {
                List<Fault> faults = Arrays.stream(Fault.values())
                        .filter(f -> host || !f.hostOnly())
                        .filter(f -> ONLY_FAULTS.isBlank() || List.of(ONLY_FAULTS.split(",")).contains(f.name())).toList();
                kind = faults.isEmpty() ? null : faults.get(random.nextInt(faults.size()));
            }
            boolean splits = kind == null || !kind.hostOnly(); // faults would hit the children too
            List<Op> ops = new ArrayList<>();
            int count = 3 + random.nextInt(8);
            for (int i = 0; i < count; i++) {
                ops.add(randomOp(random, world, dtypes, splits));
            }
            Injected fault = kind == null ? null : inject(random, kind, world, ops);
            return new Round(runSeed, index, seed, world, memcpyAllGather, memcpySendRecv, maxLead, List.copyOf(ops), fault);
        }

        private static Injected inject(SplittableRandom random, Fault kind, int world, List<Op> ops) {
            int rank = random.nextInt(world);
            int late = (rank + 1 + random.nextInt(world - 1)) % world;
            int delay = 100 + random.nextInt(200);
            // A short watchdog also bounds the operations before the fault: the fault comes early.
            int early = random.nextInt(Math.min(2, ops.size()) + 1);
            Duration shortWatchdog = Duration.ofMillis(1000 + random.nextInt(1001));
            return switch (kind) {
                case THROW -> new Injected(kind, rank, random.nextInt(ops.size()), -1, 0, LONG_WATCHDOG);
                case INTERRUPT_IN_BARRIER -> {
                    int at = random.nextInt(ops.size() + 1);
                    ops.add(at, new Host(HostKind.BARRIER, 0));
                    yield new Injected(kind, rank, at, late, delay, LONG_WATCHDOG);
                }
                case INTERRUPT_IN_AWAIT -> {
                    int at = random.nextInt(ops.size() + 1);
                    ops.add(at, new Tx(List.of(new Cmd(Kind.ALL_REDUCE, DType.FP32, ReduceOp.SUM, 256, 0)), true, true));
                    yield new Injected(kind, rank, at, late, delay, LONG_WATCHDOG);
                }
                case NEVER_ARRIVES -> {
                    ops.add(early, new Host(HostKind.BARRIER, 0));
                    yield new Injected(kind, rank, early, -1, 0, Duration.ofSeconds(1));
                }
                case LAG, LEAVES_EARLY, HANG_ABORT -> {
                    ops.add(early, new Convenience(new Cmd(Kind.ALL_REDUCE, DType.FP32, ReduceOp.SUM,
                            64 + random.nextInt(4000), 0)));
                    // HANG_ABORT: the laggard's own abort hangs (in user code, it is surely aborted by the pack; a
                    // rank that fails inside a call may close its communicator instead).
                    yield new Injected(kind, rank, early, kind == Fault.HANG_ABORT ? rank : -1, 0, shortWatchdog);
                }
                case MISMATCH -> {
                    // The faulty rank all-reduces one element more (Injection.variant).
                    int at = random.nextInt(ops.size() + 1);
                    ops.add(at, new Convenience(new Cmd(Kind.ALL_REDUCE, DType.FP32, ReduceOp.SUM,
                            64 + random.nextInt(4000), 0)));
                    yield new Injected(kind, rank, at, -1, 0, LONG_WATCHDOG);
                }
                case HOST_HANG, HOST_FAIL -> {
                    long guaranteed = ncclOperations(ops.subList(0, Math.min(ops.size(), 3)));
                    if (guaranteed == 0) {
                        ops.addFirst(new Convenience(new Cmd(Kind.ALL_REDUCE, DType.INT32, ReduceOp.MAX, 64, 0)));
                        guaranteed = 1;
                    }
                    yield new Injected(kind, rank, 1 + random.nextInt((int) Math.min(guaranteed, 3)), -1, 0, shortWatchdog);
                }
            };
        }

        /** The NCCL operations that {@code ops} surely make on every rank. */
        private static long ncclOperations(List<Op> ops) {
            long count = 0;
            for (Op op : ops) {
                if (op instanceof Tx tx) {
                    count += tx.commands().stream().filter(Cmd::alwaysNccl).count();
                } else if (op instanceof Convenience conv && conv.command().alwaysNccl()) {
                    count++;
                }
            }
            return count;
        }

        private static Op randomOp(SplittableRandom random, int world, List<DType> dtypes, boolean splits) {
            int pick = random.nextInt(100);
            if (pick < 45) {
                List<Cmd> commands = new ArrayList<>();
                int size = 1 + random.nextInt(4);
                for (int i = 0; i < size; i++) {
                    commands.add(randomCmd(random, world, dtypes, Arrays.asList(Kind.values())));
                }
                return new Tx(List.copyOf(commands), random.nextBoolean(), random.nextInt(4) != 0);
            }
            if (pick < 70) {
                return new Convenience(randomCmd(random, world, dtypes, CONVENIENT));
            }
            if (pick < 88 || !splits) {
                HostKind kind = HostKind.values()[random.nextInt(HostKind.values().length)];
                return new Host(kind, random.nextInt(world));
            }
            int[] colors = new int[world];
            int[] keys = new int[world];
            Map<Integer, List<Op>> work = new TreeMap<>();
            for (int r = 0; r < world; r++) {
                colors[r] = random.nextInt(4) - 1;
                keys[r] = random.nextInt(3) - 1;
            }
            for (int color : Arrays.stream(colors).filter(c -> c >= 0).distinct().sorted().toArray()) {
                int members = (int) Arrays.stream(colors).filter(c -> c == color).count();
                List<Op> childOps = new ArrayList<>();
                int size = 1 + random.nextInt(3);
                for (int i = 0; i < size; i++) {
                    childOps.add(randomOp(random, members, dtypes, false));
                }
                work.put(color, List.copyOf(childOps));
            }
            return new Split(colors, keys, work);
        }

        private static Cmd randomCmd(SplittableRandom random, int world, List<DType> dtypes, List<Kind> kinds) {
            Kind kind = kinds.get(random.nextInt(kinds.size()));
            boolean reduction = kind == Kind.REDUCE_SCATTER || kind == Kind.ALL_REDUCE;
            DType dtype = reduction ? REDUCED.get(random.nextInt(REDUCED.size())) : dtypes.get(random.nextInt(dtypes.size()));
            ReduceOp op = ReduceOp.values()[random.nextInt(ReduceOp.values().length)];
            boolean convenientReduceScatter = kinds == CONVENIENT && kind == Kind.REDUCE_SCATTER;
            if (convenientReduceScatter) {
                op = ReduceOp.SUM; // the convenience reduce-scatter sums
            }
            // Mostly small; sometimes large enough for several chunks and rendezvous-sized messages.
            int unit = 1 + random.nextInt(random.nextInt(10) == 0 ? 6000 : 300);
            int param = switch (kind) {
                case BROADCAST, RING -> random.nextInt(world);
                case REDUCE_SCATTER -> random.nextInt(2);
                default -> 0;
            };
            return new Cmd(kind, dtype, op, unit, param);
        }
    }

    // ================================================================== the test

    @Test
    void soak() {
        assumeFalse(Packs.SHARE_DEVICES, "the soak runs once, in the default execution (its packs fit the 8 devices)");
        assumeTrue(Files.isDirectory(Path.of("/proc/self/fd")), "the resource checks read /proc/self");
        long runSeed = FIXED_SEED != null ? FIXED_SEED : System.nanoTime() ^ 0x5DEECE66DL;
        boolean host = Packs.onHost();
        List<DType> dtypes = dtypes();
        System.out.println("soak seed " + runSeed + ": " + (ONLY_ROUND != null ? "round " + ONLY_ROUND + " only"
                : SECONDS + " s") + " (-Djnccl.soak.seed=" + runSeed + " replays it), backend " + Packs.backend());
        if (ONLY_ROUND != null) {
            runRound(Round.plan(runSeed, ONLY_ROUND, host, dtypes));
            return;
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(SECONDS);
        Map<String, Integer> tally = new TreeMap<>();
        // The first round loads the libraries and starts the JVM's lazy threads: the baseline is after it.
        Round first = Round.plan(runSeed, 0, host, dtypes);
        runRound(first);
        count(tally, first);
        Usage baseline = Usage.now();
        int rounds = 1;
        while (System.nanoTime() < deadline) {
            Round round = Round.plan(runSeed, rounds, host, dtypes);
            runRound(round);
            count(tally, round);
            rounds++;
        }
        Usage end = Usage.now();
        String where = "soak seed " + runSeed + " after " + rounds + " rounds";
        System.out.println(where + ": " + TRANSACTIONS.get() + " transactions and convenience operations (summed over"
                + " ranks), rounds by fault " + tally + ", verdicts checked " + VERDICTS.get() + ", aborts that hung and were abandoned "
                + ABORTS_HUNG.get() + "; baseline " + baseline
                + ", end " + end);
        assertTrue(end.fds() <= baseline.fds() + 8, () -> where + ": open file descriptors grew from " + baseline.fds()
                + " to " + end.fds());
        assertTrue(end.threads() <= baseline.threads() + 8, () -> where + ": threads grew from " + baseline.threads()
                + " to " + end.threads());
        assertTrue(end.shmMappings() <= baseline.shmMappings(), () -> where + ": mappings of /dev/shm/jnccl-* grew from "
                + baseline.shmMappings() + " to " + end.shmMappings());
        Set<String> left = Usage.shmNamesLeft(baseline.shmNames(), Duration.ofSeconds(10));
        assertTrue(left.isEmpty(), () -> where + ": shared-memory segments left in /dev/shm: " + left);
    }

    private static void count(Map<String, Integer> tally, Round round) {
        tally.merge(round.fault() == null ? "clean" : round.fault().kind().name(), 1, Integer::sum);
    }

    /** Runs one round and checks its outcome; every failure names the round and its seed. */
    private static void runRound(Round round) {
        System.out.println(round);
        long start = System.nanoTime();
        try {
            if (round.fault() == null) {
                Outcome outcome = launch(round, null);
                if (outcome.thrown() != null) {
                    throw new AssertionFailedError(round.where() + " failed without an injected fault: "
                            + outcome.thrown(), outcome.thrown());
                }
            } else if (round.fault().kind() == Fault.HANG_ABORT) {
                checkInChildJvm(round);
            } else {
                checkFaulty(round);
            }
            List<String> alive = Packs.packThreads();
            List<String> survivors = alive;
            assertTrue(survivors.isEmpty(), () -> round.where() + ": pack threads survived: "
                    + String.join("\n  ", survivors));
            int nativeLeft = awaitNoNativePackThreads(Duration.ofSeconds(5));
            assertEquals(0, nativeLeft, () -> round.where() + ": native threads named jnccl-* (the emulation's, started by"
                    + " the ranks) survived the pack");
        } catch (AssertionFailedError e) {
            if (e.getMessage() != null && e.getMessage().contains(round.where())) {
                throw e;
            }
            throw new AssertionFailedError(round.where() + ": " + e.getMessage(), e);
        }
        System.out.println("  round " + round.index() + " done in " + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start)
                + " ms");
    }

    /**
     * A round whose abort hangs runs in a child JVM ({@link HangAbortRound}): the emulation's thread
     * blocked in ncclCommAbort stays there for good, which this JVM's leak checks would count. The
     * child checks the round as {@link #checkFaulty} does; here its output must say it passed, with
     * the abandoned abort in its log.
     */
    private static void checkInChildJvm(Round round) {
        ChildJvm.Result result;
        try {
            result = ChildJvm.run(List.of("--enable-native-access=ALL-UNNAMED", "-Djnccl.backend=host",
                            "-Djnccl.soak.faults=" + ONLY_FAULTS),
                    Map.of("JNCCL_HOST_FAULT", "hang-abort", "JNCCL_HOST_FAULT_RANK", Integer.toString(round.fault().late())),
                    HangAbortRound.class, Long.toString(round.runSeed()), Integer.toString(round.index()));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionFailedError(round.where() + ": interrupted", e);
        }
        String output = result.output();
        Matcher passed = Pattern.compile("(?m)^PASS transactions (\\d+) verdicts (\\d+)$").matcher(output);
        assertTrue(result.exitCode() == 0 && passed.find(), () -> round.where() + ": the round's JVM failed (exit "
                + result.exitCode() + "):\n" + output);
        int hanging = round.fault().late();
        boolean hit = output.contains("ncclCommAbort of rank " + hanging + " hangs for ever");
        assertTrue(!hit || output.contains("rank " + hanging + ": ncclCommAbort did not return within "
                + HANG_ABORT_CLOSE.toMillis() + " ms"), () -> round.where() + ": no abandoned abort in\n" + output);
        if (hit) {
            ABORTS_HUNG.incrementAndGet();
        }
        System.out.println("  the ncclCommAbort of rank " + hanging + (hit ? " hung and was abandoned" : " was not called"));
        TRANSACTIONS.addAndGet(Long.parseLong(passed.group(1)));
        VERDICTS.addAndGet(Long.parseLong(passed.group(2)));
    }

    /** The JVM of a HANG_ABORT round: plans round {@code args[1]} of run {@code args[0]} and checks it. */
    public static final class HangAbortRound {
        private HangAbortRound() {}

        /**
         * Checks the round; prints {@code PASS transactions T verdicts V} when it passed.
         *
         * @param args the run's seed and the round's index
         */
        public static void main(String[] args) {
            Round round = Round.plan(Long.parseLong(args[0]), Integer.parseInt(args[1]), true, dtypes());
            System.out.println(round);
            checkFaulty(round);
            System.out.println("PASS transactions " + TRANSACTIONS.get() + " verdicts " + VERDICTS.get());
            System.out.flush();
        }
    }

    /** The dtypes the loaded backend supports: what every plan draws from. */
    private static List<DType> dtypes() {
        return Arrays.stream(DType.values()).filter(JncclRuntime.query()::supports).toList();
    }

    /** What a pack left: join's exception (null: none), each rank's own exception, and how long it took. */
    record Outcome(Throwable thrown, Map<Integer, Throwable> byRank, Duration elapsed) {
        /** The rank whose exception is {@code t}, or -1 (a rank released during its init never ran its work). */
        int rankOf(Throwable t) {
            for (Map.Entry<Integer, Throwable> entry : byRank.entrySet()) {
                if (entry.getValue() == t) {
                    return entry.getKey();
                }
            }
            return -1;
        }
    }

    /**
     * Launches the round's pack, joins it within {@code bound} (null: {@link #CLEAN_BOUND}), and
     * frees what the ranks left behind once the pack is gone.
     */
    private static Outcome launch(Round round, Duration bound) {
        Injection injection = new Injection(round);
        Map<Integer, Throwable> byRank = new ConcurrentHashMap<>();
        List<AutoCloseable> leftovers = new CopyOnWriteArrayList<>();
        Injected fault = round.fault();
        NativeEnv env = fault != null && fault.hostFault()
                ? NativeEnv.set("JNCCL_HOST_FAULT", fault.kind() == Fault.HOST_HANG ? "hang" : "fail",
                        "JNCCL_HOST_FAULT_RANK", Integer.toString(fault.rank()), "JNCCL_HOST_FAULT_AT",
                        Integer.toString(fault.at()))
                : null;
        long start = System.nanoTime();
        Throwable thrown = null;
        try (ThreadsPack pack = ThreadsCommunicators.launch(round.world(), round.options(), comm -> {
            RankContext c = new RankContext(comm, round.seed()).leftoversTo(leftovers::add);
            try {
                injection.started(comm.rank());
                for (int i = 0; i < round.ops().size() && !injection.leaves(comm.rank(), i); i++) {
                    injection.before(c, i);
                    run(c, injection.variant(comm.rank(), i, round.ops().get(i)), "op" + i,
                            injection.hook(comm.rank(), i));
                }
            } catch (Throwable t) {
                byRank.put(comm.rank(), t);
                c.abandon();
                throw t;
            }
            c.close();
        })) {
            Duration limit = bound == null ? CLEAN_BOUND : bound;
            boolean finished;
            try {
                finished = pack.join(limit);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new AssertionFailedError(round.where() + ": the test thread was interrupted", e);
            } catch (RuntimeException | Error e) {
                thrown = e;
                finished = true;
            }
            if (!finished) {
                // What the ranks that ended threw tells whether the pack failed (and so should have
                // interrupted the ranks still in their work) or not.
                StringBuilder thrownByRank = new StringBuilder();
                byRank.forEach((rank, t) -> thrownByRank.append("\n  rank ").append(rank).append(": ").append(describe(t)));
                throw new AssertionFailedError(round.where() + ": the pack did not end within " + limit
                        + "; where its threads were:\n  " + String.join("\n  ", Packs.fullStacks())
                        + "\nwhat the ranks that ended threw:" + (thrownByRank.isEmpty() ? " nothing" : thrownByRank));
            }
        } finally {
            injection.close();
            if (env != null) {
                env.close();
            }
            free(leftovers);
        }
        return new Outcome(thrown, byRank, Duration.ofNanos(System.nanoTime() - start));
    }

    /** Streams and events first (their queued work may still reference memory), then memory. */
    private static void free(List<AutoCloseable> leftovers) {
        List<AutoCloseable> ordered = new ArrayList<>(leftovers);
        ordered.sort((a, b) -> Boolean.compare(a instanceof DeviceMemory, b instanceof DeviceMemory));
        for (AutoCloseable resource : ordered) {
            try {
                resource.close();
            } catch (Exception e) {
                System.err.println("soak: freeing " + resource + " failed: " + e);
            }
        }
    }

    /** A faulty round: join throws in time, with the expected exception of every rank. */
    private static void checkFaulty(Round round) {
        Injected fault = round.fault();
        Duration bound = JOIN_SLACK.plus(fault.shortWatchdog() ? fault.watchdog() : Duration.ofMillis(fault.delayMillis()))
                .plus(fault.kind() == Fault.HANG_ABORT ? HANG_ABORT_CLOSE.multipliedBy(2) : Duration.ZERO);
        Outcome outcome = launch(round, bound);
        Throwable thrown = outcome.thrown();
        if (thrown == null) {
            throw new AssertionFailedError(round.where() + ": join() returned normally although " + fault + " was injected");
        }
        assertTrue(outcome.elapsed().compareTo(bound) <= 0, () -> round.where() + ": join() threw after "
                + outcome.elapsed().toMillis() + " ms, bound " + bound.toMillis() + " ms");
        List<Throwable> all = new ArrayList<>();
        all.add(thrown);
        all.addAll(Arrays.asList(thrown.getSuppressed()));
        String listed = all.stream().map(ThreadsFailureTest::describe).toList().toString();
        for (Map.Entry<Integer, Throwable> entry : outcome.byRank().entrySet()) {
            assertTrue(all.stream().anyMatch(t -> t == entry.getValue()), () -> round.where() + ": rank "
                    + entry.getKey() + "'s exception is not attached to join()'s: " + describe(entry.getValue()));
        }
        // One per rank; when a communicator's abort is what failed the pack first, the pack's own record
        // of that comes first and the rank's own exception is attached to it.
        int first = outcome.rankOf(thrown);
        // (A rank that left early threw nothing itself: the pack's release of its finish stands for it.)
        int expected = first >= 0 ? round.world() : round.world() + 1;
        boolean leftEarly = fault.kind() == Fault.LEAVES_EARLY && all.size() == expected - 1;
        assertEquals(leftEarly ? expected - 1 : expected, all.size(), () -> round.where() + ": join() must rethrow one exception per rank"
                + (first >= 0 ? "" : " and the pack's first failure") + ": " + listed);
        switch (fault.kind()) {
            case THROW, INTERRUPT_IN_BARRIER, INTERRUPT_IN_AWAIT -> assertEquals(fault.rank(), first,
                    () -> round.where() + ": the faulty rank's exception must be the first: " + listed);
            case NEVER_ARRIVES -> assertTrue(first != fault.rank(), () -> round.where() + ": the rank that never"
                    + " arrived cannot fail first: " + listed);
            default -> { }
        }
        for (Throwable t : all) {
            int rank = outcome.rankOf(t);
            String text = ThreadsFailureTest.chain(t);
            String who = (rank < 0 ? "the pack's" : "rank " + rank + "'s") + " exception ";
            if (rank == fault.rank() && fault.kind() == Fault.THROW) {
                assertTrue(t.getMessage().startsWith("injected"), () -> round.where() + ": " + who + describe(t));
            } else if (rank == fault.rank() && (fault.kind() == Fault.INTERRUPT_IN_BARRIER
                    || fault.kind() == Fault.INTERRUPT_IN_AWAIT)) {
                assertTrue((t instanceof JncclInterruptedException || t instanceof CommunicatorAbortedException)
                        && text.contains("interrupted"), () -> round.where() + ": " + who + "does not say it was"
                        + " interrupted: " + describe(t));
            } else {
                // A failing NCCL operation (JNCCL_HOST_FAULT=fail) may fail the execute of the faulty rank
                // and of the peers that meet it there, before the pack aborts them.
                boolean expectedType = t instanceof CommunicatorAbortedException
                        || (fault.kind() == Fault.HOST_FAIL && t instanceof NcclException);
                assertTrue(expectedType, () -> round.where() + ": " + who + "is not a CommunicatorAbortedException"
                        + (fault.kind() == Fault.HOST_FAIL ? " or an NcclException" : "") + ": " + describe(t));
                boolean named = text.contains("rank " + fault.rank()) || (first >= 0 && text.contains("rank " + first))
                        || (fault.shortWatchdog() && (text.contains("watchdog") || text.contains("did not arrive")));
                assertTrue(named, () -> round.where() + ": " + who + "names neither the faulty rank " + fault.rank()
                        + " nor the first failed rank " + first + ": " + describe(t));
            }
        }
        VERDICTS.addAndGet(checkVerdict(round, all));
    }

    /**
     * LAG, HANG_ABORT, LEAVES_EARLY and MISMATCH: every exception (each rank's, join()'s) is a
     * {@link CommunicatorAbortedException} whose first line is the same verdict, naming the faulty rank
     * and the value: the transaction it never reached (its count + 1) or the count after which it left
     * (as its summary in the diagnosis says), or the count it all-reduced against the others'.
     *
     * @return how many verdicts were checked
     */
    private static int checkVerdict(Round round, List<Throwable> all) {
        Injected fault = round.fault();
        Pattern expected = verdictPattern(round);
        if (expected == null) {
            return 0;
        }
        String verdict = null;
        for (Throwable t : all) {
            String message = t.getMessage() == null ? "" : t.getMessage();
            // The diagnosis' verdict is the first line; the consistency check's comes after "communicator of rank R
            // aborted: ", and so does the launcher's own on a rank that left while the others wait in a host-side call.
            boolean inside = fault.kind() == Fault.MISMATCH || fault.kind() == Fault.LEAVES_EARLY;
            String line = inside ? message : message.lines().findFirst().orElse("");
            Matcher m = expected.matcher(line);
            assertTrue(t instanceof CommunicatorAbortedException && m.find(), () -> round.where() + ": no verdict "
                    + expected + " in " + describe(t));
            line = inside ? m.group() : line;
            if (verdict == null) {
                verdict = line;
                if (fault.kind() != Fault.MISMATCH && m.groupCount() > 0 && m.group(1) != null) {
                    long value = Long.parseLong(m.group(1));
                    long executed = faultySummary(round, t).executed();
                    assertEquals(fault.kind() == Fault.LEAVES_EARLY ? executed : executed + 1, value,
                            () -> round.where() + ": the verdict's transaction count against rank " + fault.rank()
                                    + "'s summary: " + describe(t));
                }
            }
            assertEquals(verdict, line, () -> round.where() + ": not the same verdict on every rank: " + describe(t));
        }
        return all.size();
    }

    /**
     * The verdict of a round with a verdict-checked fault, or null: what the first line of every exception's
     * message is (LAG, HANG_ABORT, LEAVES_EARLY: group 1 is the count), or what each message holds (MISMATCH).
     */
    private static Pattern verdictPattern(Round round) {
        Injected fault = round.fault();
        String rank = "rank " + fault.rank();
        return switch (fault.kind()) {
            case LAG, HANG_ABORT -> Pattern.compile("^" + rank + " never reached (?:transaction #(\\d+)|the launcher's"
                    + " pace) \\(it is in user code: at ThreadsSoakTest\\$Injection\\.before\\(ThreadsSoakTest\\.java:\\d+\\)\\)$");
            case LEAVES_EARLY -> Pattern.compile("^" + rank + " closed its communicator after (\\d+) transaction\\(s\\)|"
                    + rank + " returned from its work while rank ");
            case MISMATCH -> {
                int unit = ((Convenience) round.ops().get(fault.at())).command().unit();
                // Either group may come first: both must be there, each with its rank(s) and count.
                yield Pattern.compile("transaction #\\d+ refused before NCCL ran it \\(consistency check, jnccl\\.debug="
                        + "detail\\): the count of collective 1 differs: (?=.*\\b" + rank + " all-reduces " + (unit + 1)
                        + " FP32 with SUM\\b)(?=.*\\branks [^;]* all-reduce " + unit + " FP32 with SUM\\b)");
            }
            default -> null;
        };
    }

    /** The faulty rank's summary in the diagnosis {@code t} carries. */
    private static RankSummary faultySummary(Round round, Throwable t) {
        Diagnosis diagnosis = ((CommunicatorAbortedException) t).diagnosis().orElseThrow(() -> new AssertionFailedError(
                round.where() + ": no diagnosis on " + describe(t)));
        return diagnosis.summaries().stream().filter(s -> s.rank() == round.fault().rank()).findFirst()
                .orElseThrow(() -> new AssertionFailedError(round.where() + ": no summary of the faulty rank in "
                        + diagnosis.describe()));
    }

    private static String describe(Throwable t) {
        return ThreadsFailureTest.describe(t);
    }

    // ================================================================== faults inside the ranks

    /** What the ranks of one round do about its fault; a no-op for a clean round. */
    private static final class Injection implements AutoCloseable {
        private final Injected fault;
        private final String where;
        /** Never counted down: ranks held back on it are released by the pack's interrupt. */
        private final CountDownLatch never = new CountDownLatch(1);
        /** Counted down when the faulty rank is about to wait (barrier or await). */
        private final CountDownLatch waiting = new CountDownLatch(1);
        private final AtomicReference<Thread> faulty = new AtomicReference<>();
        private final Thread interrupter;

        Injection(Round round) {
            this.fault = round.fault();
            this.where = round.where();
            boolean interrupts = fault != null && (fault.kind() == Fault.INTERRUPT_IN_BARRIER
                    || fault.kind() == Fault.INTERRUPT_IN_AWAIT);
            interrupter = interrupts ? Thread.ofPlatform().name("soak-interrupter").daemon(true).start(this::interrupt) : null;
        }

        /** Another thread interrupts the faulty rank a while after it started to wait. */
        private void interrupt() {
            try {
                if (waiting.await(LATCH_SECONDS, TimeUnit.SECONDS)) {
                    Thread.sleep(fault.delayMillis());
                    Thread target = faulty.get();
                    if (target != null) {
                        target.interrupt();
                    }
                }
            } catch (InterruptedException e) {
                // the round is over
            }
        }

        void started(int rank) {
            if (fault != null && rank == fault.rank()) {
                faulty.set(Thread.currentThread());
            }
        }

        /** Before operation {@code index}: the faulty rank throws, the rank that never arrives or is late waits. */
        void before(RankContext c, int index) {
            if (fault == null || fault.hostFault() || index != fault.at()) {
                return;
            }
            if (fault.kind() == Fault.THROW && c.rank == fault.rank()) {
                throw new IllegalStateException("injected: rank " + c.rank + " throws at operation " + index + " of "
                        + where);
            }
            boolean holdsBack = (fault.kind().holdsBack() && c.rank == fault.rank())
                    || (c.rank == fault.late() && fault.kind() != Fault.HANG_ABORT);
            if (holdsBack) {
                try {
                    if (!never.await(LATCH_SECONDS, TimeUnit.SECONDS)) {
                        System.err.println(where + ": rank " + c.rank + " was not released within " + LATCH_SECONDS + " s");
                    }
                } catch (InterruptedException e) {
                    // The pack's failure interrupts user code: the next jnccl call says why.
                    Thread.currentThread().interrupt();
                }
            }
            if (fault.kind() == Fault.INTERRUPT_IN_BARRIER && c.rank == fault.rank()) {
                waiting.countDown();
            }
        }

        /** Whether rank {@code rank} returns from its work before operation {@code index} (LEAVES_EARLY). */
        boolean leaves(int rank, int index) {
            return fault != null && fault.kind() == Fault.LEAVES_EARLY && rank == fault.rank() && index == fault.at();
        }

        /** Operation {@code index} as rank {@code rank} runs it: for MISMATCH, the faulty rank's has one element more. */
        Op variant(int rank, int index, Op op) {
            if (fault != null && fault.kind() == Fault.MISMATCH && rank == fault.rank() && index == fault.at()
                    && op instanceof Convenience(Cmd cmd)) {
                return new Convenience(new Cmd(cmd.kind(), cmd.dtype(), cmd.op(), cmd.unit() + 1, cmd.param()));
            }
            return op;
        }

        /**
         * What the faulty rank runs just before it executes its transaction (INTERRUPT_IN_AWAIT): the
         * interrupt then finds it in await (NCCL transports) or in execute's exchange with the peers,
         * which waits for the late rank (memcpy transports).
         */
        Runnable hook(int rank, int index) {
            return fault != null && fault.kind() == Fault.INTERRUPT_IN_AWAIT && rank == fault.rank()
                    && index == fault.at() ? waiting::countDown : null;
        }

        @Override
        public void close() {
            if (interrupter != null) {
                interrupter.interrupt();
                try {
                    interrupter.join(Duration.ofSeconds(5));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        }
    }

    // ================================================================== operations and their checks

    /** Runs {@code op} on this rank and checks its results; {@code beforeExecute} runs just before a transaction's execute. */
    private static void run(RankContext c, Op op, String tag, Runnable beforeExecute) {
        switch (op) {
            case Tx tx -> {
                TRANSACTIONS.incrementAndGet();
                transaction(c, tx, tag, beforeExecute);
            }
            case Convenience conv -> {
                TRANSACTIONS.incrementAndGet();
                Staged staged = stage(c, conv.command(), tag);
                staged.convenience().accept(c.compute());
                awaitCompute(c);
                staged.check().run();
            }
            case Host hostOp -> host(c, hostOp, tag);
            case Split split -> split(c, split, tag);
        }
    }

    private static void transaction(RankContext c, Tx tx, String tag, Runnable beforeExecute) {
        List<Staged> staged = new ArrayList<>();
        for (int i = 0; i < tx.commands().size(); i++) {
            staged.add(stage(c, tx.commands().get(i), tag + ".cmd" + i));
        }
        CudaEvent signal = tx.signal() ? c.event() : null;
        Transaction transaction;
        if (tx.fromEvent()) {
            CudaEvent ready = c.event();
            c.compute().record(ready);
            transaction = c.comm.begin(ready);
        } else {
            transaction = c.comm.begin(c.compute());
        }
        try (transaction) {
            for (Staged s : staged) {
                s.add().accept(transaction);
            }
            int commands = tx.commands().stream().mapToInt(cmd -> cmd.kind() == Kind.RING ? 2 : 1).sum(); // a send and a recv
            assertEquals(commands, transaction.size(), c.what(tag + ": commands in the transaction"));
            if (beforeExecute != null) {
                beforeExecute.run();
            }
            transaction.execute(signal);
        }
        if (signal != null) {
            c.comm.await(signal);
        } else {
            c.comm.waitOnComms(c.compute());
            awaitCompute(c);
        }
        for (Staged s : staged) {
            s.check().run();
        }
    }

    /**
     * Waits for the compute stream through the communicator: an event recorded on it completes only
     * after the communication it was ordered after, and {@link Communicator#await} notices a failure
     * of that communication (a plain stream synchronize would not).
     */
    private static void awaitCompute(RankContext c) {
        CudaEvent done = c.event();
        c.compute().record(done);
        c.comm.await(done);
    }

    /** A command with its data uploaded: how a transaction adds it, the convenience call, and the check of its results. */
    record Staged(Consumer<Transaction> add, Consumer<CudaStream> convenience, Runnable check) {}

    private static Staged stage(RankContext c, Cmd cmd, String tag) {
        return switch (cmd.kind()) {
            case REDUCE_SCATTER, ALL_REDUCE -> reduction(c, cmd, tag);
            case ALL_GATHER, ALL_GATHER_IN_PLACE -> allGather(c, cmd, tag);
            case BROADCAST -> broadcast(c, cmd, tag);
            case RING -> ring(c, cmd, tag);
            case ALL_TO_ALL -> allToAll(c, cmd, tag);
            case DESTRUCTIVE_ALL_TO_ALL -> destructiveAllToAll(c, cmd, tag);
        };
    }

    private static Staged reduction(RankContext c, Cmd cmd, String tag) {
        int n = c.world;
        boolean scatter = cmd.kind() == Kind.REDUCE_SCATTER;
        int count = scatter ? cmd.unit() * n : cmd.unit();
        int from = scatter ? c.rank * cmd.unit() : 0;
        int len = scatter ? cmd.unit() : count;
        Data.Ring ring = scatter ? Data.Ring.reduceScatter(c.rank, n) : Data.Ring.allReduce(count, n, cmd.dtype().size());
        ReduceOp op = cmd.op();
        String what = tag + " " + cmd;
        DeviceTensor tensor;
        Runnable check;
        switch (cmd.dtype()) {
            case FP32 -> {
                List<float[]> in = c.fp32All(tag, count);
                tensor = c.upload(in.get(c.rank));
                check = () -> Verify.floats(c.what(what), Data.reduce(in, op, from, len, ring),
                        Data.slice(c.floats(tensor), from, len), c.exact,
                        op == ReduceOp.SUM || op == ReduceOp.AVG ? Data.magnitude(in, from, len) : null);
            }
            case BF16 -> {
                List<short[]> in = c.bf16All(tag, count);
                tensor = c.upload(in.get(c.rank));
                check = () -> Verify.bf16(c.what(what), Data.reduceBf16(in, op, from, len, ring),
                        Data.slice(c.bf16(tensor), from, len), c.exact, Data.magnitudeBf16(in, from, len));
            }
            case INT32 -> {
                List<int[]> in = c.int32All(tag, count);
                tensor = c.upload(in.get(c.rank));
                check = () -> Verify.ints(c.what(what), Data.reduceInt(in, op, from, len), Data.slice(c.ints(tensor), from, len));
            }
            default -> throw new IllegalArgumentException("no reference for " + cmd.dtype());
        }
        Consumer<Transaction> add = scatter ? tx -> tx.reduceScatter(tensor, op) : tx -> tx.allReduce(tensor, op);
        Consumer<CudaStream> convenience;
        if (scatter) {
            // Both convenience forms: one tensor, and a list (of one)
            convenience = s -> {
                if (cmd.param() == 0) {
                    c.comm.reduceScatter(tensor, s);
                } else {
                    c.comm.reduceScatter(List.of(tensor), s);
                }
            };
        } else if (op == ReduceOp.AVG) {
            convenience = s -> c.comm.reduceMean(tensor, s);
        } else if (op == ReduceOp.MAX && cmd.dtype() == DType.FP32) {
            convenience = s -> c.comm.reduceMax(tensor, s);
        } else if (op == ReduceOp.SUM && cmd.dtype() == DType.FP32 && count == 1) {
            convenience = s -> c.comm.reduceNormSquared(tensor, s);
        } else {
            convenience = s -> c.comm.allReduce(tensor, op, s);
        }
        return new Staged(add, convenience, check);
    }

    private static Staged allGather(RankContext c, Cmd cmd, String tag) {
        int n = c.world;
        int shardBytes = cmd.unit() * cmd.dtype().size();
        byte[] mine = Data.bytes(c.seed(c.rank, tag), shardBytes);
        byte[] initial = Data.bytes(c.seed(c.rank, tag + ".sentinel"), shardBytes * n);
        DeviceTensor full;
        DeviceTensor shard;
        if (cmd.kind() == Kind.ALL_GATHER_IN_PLACE) {
            System.arraycopy(mine, 0, initial, c.rank * shardBytes, shardBytes);
            full = c.upload(cmd.dtype(), initial);
            shard = full.shard(c.rank, n);
        } else {
            shard = c.upload(cmd.dtype(), mine);
            full = c.upload(cmd.dtype(), initial);
        }
        return new Staged(tx -> tx.allGather(shard, full), null, () -> {
            byte[] got = c.raw(full);
            for (int r = 0; r < n; r++) {
                assertArrayEquals(Data.bytes(c.seed(r, tag), shardBytes), Arrays.copyOfRange(got, r * shardBytes,
                        (r + 1) * shardBytes), c.what(tag + " " + cmd + ": slice of rank " + r));
            }
        });
    }

    private static Staged broadcast(RankContext c, Cmd cmd, String tag) {
        int bytes = cmd.unit() * cmd.dtype().size();
        int root = cmd.param();
        DeviceTensor tensor = c.upload(cmd.dtype(), Data.bytes(c.seed(c.rank, tag), bytes));
        return new Staged(tx -> tx.broadcast(tensor, root), s -> c.comm.broadcast(tensor, root, s),
                () -> assertArrayEquals(Data.bytes(c.seed(root, tag), bytes), c.raw(tensor), c.what(tag + " " + cmd)));
    }

    /** Send to rank + shift, receive from rank - shift; messages of different sizes per sender. */
    private static Staged ring(RankContext c, Cmd cmd, String tag) {
        int n = c.world;
        int to = (c.rank + cmd.param()) % n;
        int from = (c.rank - cmd.param() + n) % n;
        int mineBytes = (cmd.unit() + 3 * c.rank) * cmd.dtype().size();
        int fromBytes = (cmd.unit() + 3 * from) * cmd.dtype().size();
        byte[] mine = Data.bytes(c.seed(c.rank, tag), mineBytes);
        DeviceTensor send = c.upload(cmd.dtype(), mine);
        DeviceTensor recv = c.upload(cmd.dtype(), Data.bytes(c.seed(c.rank, tag + ".sentinel"), fromBytes));
        return new Staged(tx -> tx.send(send, to).recv(recv, from), null, () -> {
            assertArrayEquals(Data.bytes(c.seed(from, tag), fromBytes), c.raw(recv), c.what(tag + " " + cmd
                    + ": message from rank " + from));
            assertArrayEquals(mine, c.raw(send), c.what(tag + " " + cmd + ": sent buffer unchanged"));
        });
    }

    private static Staged allToAll(RankContext c, Cmd cmd, String tag) {
        int n = c.world;
        int slotBytes = cmd.unit() * cmd.dtype().size();
        DeviceTensor send = c.upload(cmd.dtype(), Data.bytes(c.seed(c.rank, tag), slotBytes * n));
        DeviceTensor recv = c.upload(cmd.dtype(), Data.bytes(c.seed(c.rank, tag + ".sentinel"), slotBytes * n));
        return new Staged(tx -> tx.allToAll(send, recv), s -> c.comm.allToAll(send, recv, s), () -> {
            byte[] got = c.raw(recv);
            for (int r = 0; r < n; r++) {
                assertArrayEquals(Arrays.copyOfRange(Data.bytes(c.seed(r, tag), slotBytes * n), c.rank * slotBytes,
                        (c.rank + 1) * slotBytes), Arrays.copyOfRange(got, r * slotBytes, (r + 1) * slotBytes),
                        c.what(tag + " " + cmd + ": slot from rank " + r));
            }
        });
    }

    /** Checked against {@link AllToAllSchedule}'s layout: slot s holds sourceOfSlot(s)'s shard, the stale slot this rank's own. */
    private static Staged destructiveAllToAll(RankContext c, Cmd cmd, String tag) {
        int n = c.world;
        int slotBytes = cmd.unit() * cmd.dtype().size();
        byte[] mine = Data.bytes(c.seed(c.rank, tag), slotBytes * n);
        DeviceTensor tensor = c.upload(cmd.dtype(), mine);
        return new Staged(tx -> tx.destructiveAllToAll(tensor), null, () -> {
            byte[] got = c.raw(tensor);
            for (int slot = 0; slot < n; slot++) {
                int source = AllToAllSchedule.sourceOfSlot(c.rank, n, slot);
                byte[] expected = source < 0
                        ? Arrays.copyOfRange(mine, slot * slotBytes, (slot + 1) * slotBytes)
                        : Arrays.copyOfRange(Data.bytes(c.seed(source, tag), slotBytes * n), c.rank * slotBytes,
                                (c.rank + 1) * slotBytes);
                assertArrayEquals(expected, Arrays.copyOfRange(got, slot * slotBytes, (slot + 1) * slotBytes),
                        c.what(tag + " " + cmd + ": slot " + slot + (source < 0 ? " (stale)" : " from rank " + source)));
            }
        });
    }

    private static void host(RankContext c, Host op, String tag) {
        int n = c.world;
        List<byte[]> all = new ArrayList<>();
        for (int r = 0; r < n; r++) {
            all.add(Data.bytes(c.seed(r, tag), 1 + (int) Math.floorMod(c.seed(r, tag + ".length"), 40L)));
        }
        switch (op.kind()) {
            case BARRIER -> c.comm.barrier();
            case GATHER -> {
                List<byte[]> got = c.comm.gatherBytesHost(all.get(c.rank).clone(), op.root());
                if (c.rank == op.root()) {
                    assertEquals(n, got.size(), c.what(tag + " " + op + ": entries"));
                    for (int r = 0; r < n; r++) {
                        assertArrayEquals(all.get(r), got.get(r), c.what(tag + " " + op + ": entry of rank " + r));
                    }
                } else {
                    assertTrue(got.isEmpty(), c.what(tag + " " + op + ": a non-root rank gets nothing"));
                }
            }
            case ALL_GATHER -> {
                List<byte[]> got = c.comm.allGatherBytesHost(all.get(c.rank).clone());
                assertEquals(n, got.size(), c.what(tag + " " + op + ": entries"));
                for (int r = 0; r < n; r++) {
                    assertArrayEquals(all.get(r), got.get(r), c.what(tag + " " + op + ": entry of rank " + r));
                }
            }
            case ALL_GATHER_LONGS -> {
                long[] got = c.comm.allGatherLongsHost(c.seed(c.rank, tag));
                long[] expected = new long[n];
                Arrays.setAll(expected, r -> c.seed(r, tag));
                assertArrayEquals(expected, got, c.what(tag + " " + op));
            }
        }
    }

    /** Splits, runs each color's work on its child (checked like the parent's), closes the child, then meets the parent's ranks. */
    private static void split(RankContext c, Split split, String tag) {
        int color = split.colors()[c.rank];
        int key = split.keys()[c.rank];
        List<Integer> members = split.members(color);
        String what = tag + " split (color " + color + ", key " + key + ")";
        Optional<Communicator> child = c.comm.split(color, key);
        assertEquals(color >= 0, child.isPresent(), c.what(what + ": a communicator exactly for a color of 0 or more"));
        if (child.isPresent()) {
            try (Communicator sub = child.get()) {
                assertEquals(members.size(), sub.worldSize(), c.what(what + ": child world size"));
                assertEquals(members.indexOf(c.rank), sub.rank(), c.what(what + ": child rank"));
                // Every member draws the same data: the seed depends on the color only.
                RankContext sc = new RankContext(sub, Data.seed(c.seed, 1000 + color, tag));
                List<Op> work = split.work().get(color);
                try {
                    for (int i = 0; i < work.size(); i++) {
                        run(sc, work.get(i), tag + ".child" + color + ".op" + i, null);
                    }
                } catch (Throwable t) {
                    sc.abandon();
                    throw t;
                }
                sc.close();
            }
        }
        long[] ranks = c.comm.allGatherLongsHost(c.rank);
        assertEquals(c.world, ranks.length, c.what(what + ": parent host gather after the child closed"));
    }

    // ================================================================== resources of the process

    /**
     * What the process holds: open file descriptors, threads (native ones included), mappings of the
     * emulation's shared-memory segments, and the segment names in /dev/shm.
     */
    record Usage(long fds, long threads, long shmMappings, Set<String> shmNames) {
        private static final String SHM_PREFIX = "jnccl-";

        static Usage now() {
            return new Usage(list(Path.of("/proc/self/fd")).count(), list(Path.of("/proc/self/task")).count(),
                    countShmMappings(), listShmNames());
        }

        private static Stream<Path> list(Path dir) {
            try (Stream<Path> entries = Files.list(dir)) {
                return entries.toList().stream();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        private static long countShmMappings() {
            try {
                return Files.readAllLines(Path.of("/proc/self/maps")).stream().filter(l -> l.contains("/dev/shm/" + SHM_PREFIX))
                        .count();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }

        static Set<String> listShmNames() {
            Path shm = Path.of("/dev/shm");
            if (!Files.isDirectory(shm)) {
                return Set.of();
            }
            Set<String> names = new TreeSet<>();
            list(shm).map(p -> p.getFileName().toString()).filter(name -> name.startsWith(SHM_PREFIX)).forEach(names::add);
            return names;
        }

        /**
         * Segment names that were not there at {@code baseline} and stay longer than {@code grace}
         * (other processes on the machine may be creating segments of their own, each only for the
         * moment of a communicator's init).
         */
        static Set<String> shmNamesLeft(Set<String> baseline, Duration grace) {
            long deadline = System.nanoTime() + grace.toNanos();
            while (true) {
                Set<String> left = new TreeSet<>(listShmNames());
                left.removeAll(baseline);
                if (left.isEmpty() || System.nanoTime() > deadline) {
                    return left;
                }
                sleep(100);
            }
        }

        /** Threads of this process named jnccl-* (native threads inherit their creator's name: the emulation's stream workers). */
        private static long nativePackThreads() {
            return list(Path.of("/proc/self/task")).filter(task -> {
                try {
                    return Files.readString(task.resolve("comm")).startsWith("jnccl-");
                } catch (IOException e) {
                    return false; // the thread has ended meanwhile
                }
            }).count();
        }
    }

    /** Waits (bounded) until no native thread named jnccl-* is left; returns how many are. */
    static int awaitNoNativePackThreads(Duration grace) {
        long deadline = System.nanoTime() + grace.toNanos();
        while (true) {
            long alive = Usage.nativePackThreads();
            if (alive == 0 || System.nanoTime() > deadline) {
                return (int) alive;
            }
            sleep(50);
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionFailedError("interrupted", e);
        }
    }

}
