package dev.jnccl.it;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.bindings.NativeLibraries;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * {@link MpiWorldsTest} on real NCCL under Open MPI: W processes on GPU 0 ({@code JNCCL_DEVICE=0}),
 * each with its own {@code NCCL_HOSTID}, NCCL over its socket transport on {@code lo}. Skipped, with
 * the reason, unless the backend is {@code cuda} and Open MPI's mpirun is installed.
 * scripts/gpu/gpu-mpi-test.sh runs it from the bundle.
 */
@Tag("gpu")
@Tag("mpi") // bin/gpu-tests leaves it to scripts/gpu/gpu-mpi-test.sh (which gpu-all.sh runs beside it)
@Timeout(value = 600, unit = TimeUnit.SECONDS, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
class GpuMpiWorldsTest extends MpiWorldsChecks {
    private static final MpiJobs.Launcher LAUNCHER = MpiJobs.Launcher.OPEN_MPI;

    @Override
    MpiJobs jobs(MpiJobs.Launcher launcher) {
        return new MpiJobs(launcher, System.getProperty("jnccl.it.mpi.backend", "cuda"), true,
                Map.of("NCCL_SOCKET_IFNAME", "lo", "NCCL_NVLS_ENABLE", "0"));
    }

    @BeforeEach
    void requireCuda() {
        String wanted = System.getProperty("jnccl.it.mpi.backend", "cuda");
        String backend;
        try {
            backend = NativeLibraries.load().backend().id();
        } catch (RuntimeException e) {
            backend = "unavailable (" + e.getMessage() + ")";
        }
        assumeTrue(backend.equals(wanted), "backend resolved to " + backend + "; this test needs a CUDA device and"
                + " jnccl.backend=cuda or auto (-Djnccl.it.mpi.backend=host exercises it on the emulation)");
    }

    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {2, 4})
    void everyOperationChecked(int world) throws Exception {
        everyOperation(LAUNCHER, world);
    }

    @Test
    void mpiErrorCarriesMpisText() throws Exception {
        errorString(LAUNCHER);
    }

    @Test
    void mpiInitialisedByTheApplicationIsLeftAlone() throws Exception {
        hostInitialisedMpi(LAUNCHER);
    }

    @Test
    void aThrowingRankEndsTheJob() throws Exception {
        throwingRank(LAUNCHER);
    }

    @Test
    void aThrowingRankEndsTheJobWithCreateAndTryWithResources() throws Exception {
        throwingRankWithCreate(LAUNCHER);
    }

    @Test
    void aRankThatClosesLateStillClosesCleanly() throws Exception {
        lateCloser(LAUNCHER);
    }

    @Test
    void aKilledRankEndsTheJob() throws Exception {
        killedRank(LAUNCHER);
    }

    @Test
    void aRankAbsentFromABarrierIsNamedAtTheDeadline() throws Exception {
        absentRank(LAUNCHER, "absent-barrier", "barrier");
    }

    @Test
    void aRankThatCreatesLateIsNamedAtTheInitDeadline() throws Exception {
        lateCreator(LAUNCHER);
    }
}
