package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import dev.jnccl.bindings.Libc;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.MethodHandle;
import java.util.Optional;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/**
 * The ncclConfig_t tuning of {@link CommunicatorOptions} (minCTAs, maxCTAs, cgaClusterSize, the
 * communicator's name): each check of the {@code with*} methods and the record constructor, and, on
 * the host emulation (which keeps what it received, NCCL's defaults applied, and answers
 * {@code jnccl_emu_comm_config}), that the values arrive at init, at the blocking child of
 * {@code BLOCKING_SPLIT} mode, and at a split communicator.
 */
class TuningTest {
    private static final CommunicatorOptions DEFAULTS = CommunicatorOptions.defaults();

    @Test
    void defaultsLeaveNcclsValues() {
        assertEquals(CommunicatorOptions.NCCL_DEFAULT, DEFAULTS.minCTAs());
        assertEquals(CommunicatorOptions.NCCL_DEFAULT, DEFAULTS.maxCTAs());
        assertEquals(CommunicatorOptions.NCCL_DEFAULT, DEFAULTS.cgaClusterSize());
        assertEquals("", DEFAULTS.name());
        CommunicatorOptions tuned = DEFAULTS.withCTAs(2, 8).withCgaClusterSize(0).withName("grads");
        assertEquals(2, tuned.minCTAs());
        assertEquals(8, tuned.maxCTAs());
        assertEquals(0, tuned.cgaClusterSize());
        assertEquals("grads", tuned.name());
        assertEquals(DEFAULTS.initTimeout(), tuned.initTimeout());
        assertEquals(tuned, tuned.withMode(tuned.mode()));
        // The six-value constructor keeps NCCL's tuning.
        assertEquals(DEFAULTS, new CommunicatorOptions(DEFAULTS.initTimeout(), DEFAULTS.closeTimeout(),
                DEFAULTS.watchdogTimeout(), DEFAULTS.watchdogInterval(), DEFAULTS.flightRecorderSize(), DEFAULTS.mode()));
    }

    @Test
    void ctaBoundsAreCheckedWithTheirRange() {
        expect("CommunicatorOptions: minCTAs 0 is out of range: expected 1 to 64, or NCCL_DEFAULT (-1)",
                () -> DEFAULTS.withCTAs(0, 4));
        expect("CommunicatorOptions: maxCTAs 65 is out of range: expected 1 to 64, or NCCL_DEFAULT (-1)",
                () -> DEFAULTS.withCTAs(1, 65));
        expect("CommunicatorOptions: minCTAs -2 is out of range", () -> DEFAULTS.withCTAs(-2, 4));
        expect("CommunicatorOptions: minCTAs 9 is more than maxCTAs 8: expected minCTAs <= maxCTAs",
                () -> DEFAULTS.withCTAs(9, 8));
        expect("CommunicatorOptions: minCTAs 9 is more than maxCTAs 8", () -> new CommunicatorOptions(
                DEFAULTS.initTimeout(), DEFAULTS.closeTimeout(), DEFAULTS.watchdogTimeout(), DEFAULTS.watchdogInterval(),
                8, DEFAULTS.mode(), 9, 8, CommunicatorOptions.NCCL_DEFAULT, ""));
        // One bound alone is fine (NCCL's default for the other).
        assertEquals(64, DEFAULTS.withCTAs(CommunicatorOptions.NCCL_DEFAULT, 64).maxCTAs());
        assertEquals(64, DEFAULTS.withCTAs(64, CommunicatorOptions.NCCL_DEFAULT).minCTAs());
    }

    @Test
    void clusterSizeAndNameAreChecked() {
        expect("CommunicatorOptions: cgaClusterSize 9 is out of range: expected 0 to 8",
                () -> DEFAULTS.withCgaClusterSize(9));
        expect("CommunicatorOptions: cgaClusterSize -5 is out of range: expected 0 to 8",
                () -> DEFAULTS.withCgaClusterSize(-5));
        assertEquals(8, DEFAULTS.withCgaClusterSize(8).cgaClusterSize());
        NullPointerException none = assertThrows(NullPointerException.class, () -> DEFAULTS.withName(null));
        assertEquals("CommunicatorOptions: name is null (\"\" for none)", none.getMessage());
        expect("CommunicatorOptions: name \"a\0b\" is not valid: expected at most 256 characters and no NUL",
                () -> DEFAULTS.withName("a\0b"));
        expect("is not valid: expected at most 256 characters and no NUL (it has 257)",
                () -> DEFAULTS.withName("n".repeat(257)));
        assertEquals(256, DEFAULTS.withName("n".repeat(256)).name().length());
    }

    private static void expect(String message, Runnable call) {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, call::run);
        assertTrue(e.getMessage().contains(message), e.getMessage());
    }

    /** What the emulation received: minCTAs, maxCTAs, cgaClusterSize, name. */
    private record Received(int minCTAs, int maxCTAs, int cgaClusterSize, String name) {}

    private static Received received(Communicator comm) {
        MethodHandle query = Libc.linker().downcallHandle(
                SymbolLookup.loaderLookup().findOrThrow("jnccl_emu_comm_config"),
                FunctionDescriptor.of(ValueLayout.JAVA_INT, ValueLayout.ADDRESS, ValueLayout.ADDRESS,
                        ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.ADDRESS, ValueLayout.JAVA_LONG));
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment ints = arena.allocate(ValueLayout.JAVA_INT, 3);
            MemorySegment name = arena.allocate(512);
            int result = (int) query.invokeExact(comm.ncclComm().workHandle(), ints,
                    ints.asSlice(4), ints.asSlice(8), name, 512L);
            assertEquals(0, result, "jnccl_emu_comm_config");
            return new Received(ints.getAtIndex(ValueLayout.JAVA_INT, 0), ints.getAtIndex(ValueLayout.JAVA_INT, 1),
                    ints.getAtIndex(ValueLayout.JAVA_INT, 2), name.getString(0));
        } catch (Throwable e) {
            throw new AssertionError(e);
        }
    }

    private static void assumeEmulation() {
        assumeTrue(JncclRuntime.query().backend() == Backend.HOST,
                "the configuration a communicator received is asked from the host emulation");
    }

    @ParameterizedTest
    @EnumSource(CommunicatorMode.class)
    void tuningArrivesAtInitAndAtSplits(CommunicatorMode mode) {
        assumeEmulation();
        CommunicatorOptions options = DEFAULTS.withMode(mode).withCTAs(3, 12).withCgaClusterSize(2)
                .withName("jnccl-tuning-test");
        try (Communicator comm = Communicator.single(0, options)) {
            assertEquals(new Received(3, 12, 2, "jnccl-tuning-test"), received(comm));
            Optional<Communicator> child = comm.split(0, 0);
            assertTrue(child.isPresent());
            try (Communicator split = child.get()) {
                assertEquals(new Received(3, 12, 2, "jnccl-tuning-test"), received(split));
            }
        }
    }

    @Test
    void oneBoundSetPassesNcclsDefaultForTheOther() {
        assumeEmulation();
        try (Communicator comm = Communicator.single(0, DEFAULTS.withCTAs(CommunicatorOptions.NCCL_DEFAULT, 5))) {
            assertEquals(new Received(1, 5, 4, ""), received(comm));
        }
        try (Communicator comm = Communicator.single(0, DEFAULTS.withCTAs(7, CommunicatorOptions.NCCL_DEFAULT))) {
            assertEquals(new Received(7, 64, 4, ""), received(comm));
        }
        try (Communicator comm = Communicator.single(0)) {
            assertEquals(new Received(1, 64, 4, ""), received(comm));
        }
    }
}
