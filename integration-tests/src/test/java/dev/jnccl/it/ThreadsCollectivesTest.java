package dev.jnccl.it;

import dev.jnccl.cuda.CudaStream;
import dev.jnccl.it.Packs.Mode;
import dev.jnccl.testsupport.NativeEnv;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * Threads mode, worlds 1, 2, 3, 4 and 8 (odd sizes included) x the four combinations of the memcpy
 * transports: every transaction command, every convenience operation, the host helpers, a mixed
 * transaction, send-only transactions with different numbers of receives per rank, and
 * transactions overlapping "compute" on another stream — random data from per-rank seeds, checked
 * element by element against Java references (bit-exact on the host emulation).
 *
 * <p>Worlds larger than the visible device count are skipped with a reason (on the host emulation
 * there are 8 virtual devices, so nothing is skipped).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class ThreadsCollectivesTest {

    static Stream<Arguments> matrix() {
        List<Arguments> cases = new ArrayList<>();
        for (int world : new int[] {1, 2, 3, 4, 8}) {
            for (Mode mode : Mode.all()) {
                cases.add(Arguments.of(world, mode));
            }
        }
        return cases.stream();
    }

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("matrix")
    void everyTransactionCommand(int world, Mode mode) {
        Packs.run(world, mode.options(), Scenarios::transactionCommands);
    }

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("matrix")
    void everyConvenienceOperation(int world, Mode mode) {
        Packs.run(world, mode.options(), Scenarios::convenienceOperations);
    }

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("matrix")
    void hostHelpers(int world, Mode mode) {
        Packs.run(world, mode.options(), Scenarios::hostHelpers);
    }

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("matrix")
    void mixedTransaction(int world, Mode mode) {
        Packs.run(world, mode.options(), Scenarios::mixedTransaction);
    }

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("matrix")
    void sendOnlyTransactions(int world, Mode mode) {
        Packs.run(world, mode.options(), Scenarios::sendOnly);
    }

    @ParameterizedTest(name = "world {0}, {1}")
    @MethodSource("matrix")
    void overlapWithCompute(int world, Mode mode) {
        Packs.run(world, mode.options(), c -> Scenarios.overlapWithCompute(c, slowStream(c, 5_000)));
    }

    /**
     * The communication is the slow side (every NCCL operation of rank 0 delayed, so every rank's
     * collectives wait for it): waitOnComms, the signal events and the convenience operations'
     * stream ordering must make the compute stream wait, or it reads stale data.
     */
    @SuppressWarnings("try")
    @ParameterizedTest(name = "world 3, {0}")
    @MethodSource("dev.jnccl.it.Packs$Mode#all")
    void slowCommunication(Mode mode) {
        Packs.assumeHost("JNCCL_HOST_DELAY_RANK slows a rank's NCCL operations");
        try (NativeEnv ignored = NativeEnv.set("JNCCL_HOST_DELAY_US", "15000", "JNCCL_HOST_DELAY_RANK", "0")) {
            Packs.run(3, mode.options(), c -> {
                Scenarios.waitOnComms(c);
                Scenarios.overlapWithCompute(c, c.compute());
                Scenarios.convenienceOperations(c);
            });
        }
    }

    /**
     * A new stream of this rank whose every operation the host emulation delays by {@code micros}
     * (JNCCL_HOST_DELAY_US is read when a stream is created; the ranks agree through barriers so that
     * the variable is set only while they create their streams). On CUDA: a plain stream.
     */
    static CudaStream slowStream(RankContext c, long micros) {
        if (!c.exact) {
            return c.newStream();
        }
        c.comm.barrier();
        NativeEnv env = c.rank == 0 ? NativeEnv.set("JNCCL_HOST_DELAY_US", Long.toString(micros)) : null;
        CudaStream stream;
        try {
            c.comm.barrier();
            stream = c.newStream();
            c.comm.barrier();
        } finally {
            if (env != null) {
                env.close();
            }
        }
        c.comm.barrier();
        return stream;
    }
}
