package dev.jnccl.mpi;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.Backend;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.JncclRuntime;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.mpi.internal.MpiLibrary;
import java.util.Map;
import java.util.OptionalInt;
import org.junit.jupiter.api.Test;

/**
 * What MPI mode decides without MPI: option checks and the device choice (option, property,
 * node-local rank, and the error for more local ranks than devices). The MPI jobs themselves are
 * in the integration tests (MpiWorldsTest).
 */
class MpiCommunicatorsTest {

    @Test
    void optionsRefuseANegativeDevice() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> MpiOptions.defaults().withDevice(-2));
        assertEquals("MpiOptions: device -2 is negative: expected 0 or more", e.getMessage());
        assertEquals("MpiOptions: communicator options are null", assertThrows(NullPointerException.class,
                () -> MpiOptions.defaults().withCommunicator(null)).getMessage());
        assertEquals("MpiOptions: device is null (use OptionalInt.empty())", assertThrows(NullPointerException.class,
                () -> new MpiOptions(CommunicatorOptions.defaults(), null)).getMessage());
        assertEquals(OptionalInt.of(0), MpiOptions.defaults().withDevice(0).device());
    }

    @Test
    void continuingWithoutFailedRanksIsOffByDefaultAndRefusesANegativeMinimum() {
        assertEquals(0, MpiOptions.defaults().minWorld());
        assertEquals(0, new MpiOptions(CommunicatorOptions.defaults(), OptionalInt.of(1)).minWorld());
        int minWorld = 1 + new java.util.Random().nextInt(64);
        MpiOptions options = MpiOptions.defaults().withDevice(1).withContinueWithoutFailedRanks(minWorld);
        assertEquals(minWorld, options.minWorld());
        assertEquals(minWorld, options.withDevice(0).withCommunicator(CommunicatorOptions.defaults()).minWorld());
        assertEquals(OptionalInt.of(1), options.device());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> MpiOptions.defaults().withContinueWithoutFailedRanks(-minWorld));
        assertTrue(e.getMessage().contains("minWorld") && e.getMessage().contains("-" + minWorld), e.getMessage());
    }

    @Test
    void aMinimumAboveTheWorldIsRefusedNamingBoth() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> MpiCommunicators.checkMinWorld(MpiOptions.defaults().withContinueWithoutFailedRanks(5), 4));
        assertEquals("create: MpiOptions.withContinueWithoutFailedRanks(5) exceeds the job's 4 processes: allowed"
                + " 0 (off) or 1 to 4", e.getMessage());
        MpiCommunicators.checkMinWorld(MpiOptions.defaults().withContinueWithoutFailedRanks(4), 4);
        MpiCommunicators.checkMinWorld(MpiOptions.defaults(), 1);
    }

    @Test
    void theDeviceIsTheNodeLocalRankUnlessOverridden() {
        int visible = Cuda.deviceCount();
        String[] source = new String[1];
        assertEquals(visible - 1, MpiCommunicators.device(MpiOptions.defaults(), visible - 1, visible, source));
        assertEquals("node-local rank", source[0]);
        assertEquals(0, MpiCommunicators.device(MpiOptions.defaults().withDevice(0), visible - 1, visible, source));
        assertEquals("MpiOptions.withDevice", source[0]);
        System.setProperty(MpiCommunicators.DEVICE_PROPERTY, String.valueOf(visible - 1));
        try {
            assertEquals(visible - 1, MpiCommunicators.device(MpiOptions.defaults(), 0, 1, source));
            assertEquals("system property jnccl.device", source[0]);
            // The option wins over the property.
            assertEquals(0, MpiCommunicators.device(MpiOptions.defaults().withDevice(0), 0, 1, source));
            System.setProperty(MpiCommunicators.DEVICE_PROPERTY, "zero");
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> MpiCommunicators.device(MpiOptions.defaults(), 0, 1, source));
            assertTrue(e.getMessage().contains("jnccl.device=zero is not a device number"), e.getMessage());
        } finally {
            System.clearProperty(MpiCommunicators.DEVICE_PROPERTY);
        }
    }

    @Test
    void aLauncherOfAnotherMpiIsRefusedWithTheFix() {
        int started = 2 + new java.util.Random().nextInt(15);
        IllegalStateException mpich = assertThrows(IllegalStateException.class, () -> MpiCommunicators.checkLauncher(
                MpiLibrary.Abi.OPEN_MPI, "/usr/lib/libmpi.so.40 (ldconfig)", 1, Map.of("PMI_SIZE", "" + started)::get));
        assertEquals("create: MPI says this process is rank 0 of 1, but its launcher started " + started
                + " processes (PMI_SIZE=" + started + ", set by an MPICH-style launcher (mpirun.mpich / Hydra, srun"
                + " --mpi=pmi2)): the launcher is of another MPI than the library jnccl loaded, /usr/lib/libmpi.so.40"
                + " (ldconfig) (Open MPI ABI). Start the job with that library's launcher (mpirun.openmpi), or load the"
                + " library of this launcher with -Djnccl.mpi.library=/path/to/libmpi.so (environment JNCCL_MPI_LIBRARY)",
                mpich.getMessage());
        IllegalStateException openMpi = assertThrows(IllegalStateException.class, () -> MpiCommunicators.checkLauncher(
                MpiLibrary.Abi.MPICH, "libmpich.so.12", 1, Map.of("OMPI_COMM_WORLD_SIZE", "" + started)::get));
        assertTrue(openMpi.getMessage().contains("(OMPI_COMM_WORLD_SIZE=" + started + ", set by Open MPI's mpirun"),
                openMpi.getMessage());
        assertTrue(openMpi.getMessage().contains("launcher (mpirun.mpich)"), openMpi.getMessage());
        // The launcher and the library agree, a job of one, or no launcher at all (a singleton): accepted.
        MpiCommunicators.checkLauncher(MpiLibrary.Abi.MPICH, "lib", started, Map.of("PMI_SIZE", "" + started)::get);
        MpiCommunicators.checkLauncher(MpiLibrary.Abi.OPEN_MPI, "lib", 1, Map.of("OMPI_COMM_WORLD_SIZE", "1")::get);
        MpiCommunicators.checkLauncher(MpiLibrary.Abi.OPEN_MPI, "lib", 1, Map.<String, String>of()::get);
    }

    @Test
    void moreLocalRanksThanDevicesIsAnErrorNamingWhatToDo() {
        int visible = Cuda.deviceCount();
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> MpiCommunicators.device(MpiOptions.defaults(), visible, visible + 1, new String[1]));
        String message = e.getMessage();
        assertTrue(message.contains("node-local rank " + visible + " (of " + (visible + 1) + " processes"), message);
        String setting = JncclRuntime.query().backend() == Backend.HOST ? "JNCCL_HOST_DEVICES=" : "CUDA_VISIBLE_DEVICES=";
        assertTrue(message.contains(visible + " device(s) visible (" + setting), message);
        assertTrue(message.contains("JNCCL_DEVICE"), message);
        IllegalArgumentException tooHigh = assertThrows(IllegalArgumentException.class,
                () -> MpiCommunicators.device(MpiOptions.defaults().withDevice(visible), 0, 1, new String[1]));
        assertTrue(tooHigh.getMessage().contains("device " + visible + " (MpiOptions.withDevice) but only " + visible),
                tooHigh.getMessage());
    }

    @Test
    void theNodeLocalRankCountsTheLowerRanksOfTheSameNode() {
        java.util.List<String> nodes = java.util.List.of("b", "a", "b", "c", "a", "b");
        int[][] expected = {{0, 3}, {0, 2}, {1, 3}, {0, 1}, {1, 2}, {2, 3}};
        for (int rank = 0; rank < nodes.size(); rank++) {
            org.junit.jupiter.api.Assertions.assertArrayEquals(expected[rank], MpiCommunicators.nodeLocal(nodes, rank),
                    "rank " + rank + " of " + nodes);
        }
    }
}
