package dev.jnccl;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import dev.jnccl.internal.OptionChecks;
import dev.jnccl.spi.Command;
import dev.jnccl.spi.Command.Kind;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.IntFunction;
import org.junit.jupiter.api.Test;

/**
 * The consistency check's judgement without any rank: each simulated rank's commands (tensors of
 * raw addresses, nothing native) go through the same encoding as on the wire, and the verdict on
 * all of them is exactly the line every rank aborts with. Matching steps of every kind give no
 * verdict; each field that NCCL would run silently mismatched (count, dtype, op and a scaled sum's
 * factor, root, the kind, a missing collective, the uneven counts, sends against receives) gives
 * one naming the ranks, the field and both values.
 */
class CommandFingerprintsTest {
    private static final String REFUSED = " refused before NCCL ran it (consistency check, jnccl.debug=detail): ";

    private static DeviceTensor fp32(long count) {
        return new DeviceTensor(0x1000, DType.FP32, count);
    }

    private static DeviceTensor t(DType dtype, long count) {
        return new DeviceTensor(0x1000, dtype, count);
    }

    /** The verdict on {@code world} ranks whose commands {@code commands} gives, all labelled transaction #41. */
    private static String verdict(int world, IntFunction<List<Command>> commands) {
        List<byte[]> gathered = new ArrayList<>();
        for (int r = 0; r < world; r++) {
            gathered.add(CommandFingerprints.encode("transaction #41", commands.apply(r)));
        }
        return CommandFingerprints.verdict(gathered);
    }

    private static Command allReduce(DeviceTensor t, ReduceOp op) {
        return Command.of(Kind.ALL_REDUCE, t, t, op, 0);
    }

    @Test
    void matchingStepsOfEveryKindPass() {
        int world = 3;
        assertNull(verdict(world, r -> List.of(
                allReduce(fp32(4096), ReduceOp.scaledSum(0.5)),
                Command.of(Kind.REDUCE_SCATTER, fp32(3 * 7), fp32(7), ReduceOp.AVG, 0),
                Command.of(Kind.ALL_GATHER, fp32(7), fp32(21), null, 0),
                Command.of(Kind.BROADCAST, fp32(9), fp32(9), null, 2),
                // only the root has the reduce's destination and the scatter's source
                Command.of(Kind.REDUCE, fp32(9), r == 1 ? fp32(9) : null, ReduceOp.MAX, 1),
                Command.of(Kind.GATHER, fp32(5), r == 0 ? fp32(15) : null, null, 0),
                Command.of(Kind.SCATTER, r == 2 ? fp32(15) : null, fp32(5), null, 2),
                Command.of(Kind.ALL_TO_ALL, fp32(30), fp32(30), null, 0),
                Command.of(Kind.DESTRUCTIVE_ALL_TO_ALL, fp32(30), fp32(30), null, 0),
                // rank r sends r + p + 1 elements to p: p receives r + p + 1 from r
                Command.counted(Kind.UNEVEN_ALL_TO_ALL, fp32(100), new long[] {r + 1, r + 2, r + 3}, fp32(100),
                        new long[] {r + 1, r + 2, r + 3}),
                Command.counted(Kind.ALL_GATHER_V, fp32(r + 1), null, fp32(6), new long[] {1, 2, 3}),
                // a ring of sends: r to r + 1, received from r - 1
                Command.of(Kind.SEND, fp32(10 + r), fp32(10 + r), null, (r + 1) % world),
                Command.of(Kind.RECV, fp32(10 + (r + 2) % world), fp32(10 + (r + 2) % world), null, (r + 2) % world))));
    }

    @Test
    void eachDifferingFieldOfACollectiveIsNamedWithTheCulpritAndBothValues() {
        assertEquals("transaction #41" + REFUSED + "the count of collective 1 differs: rank 1 all-reduces 4095 FP32"
                        + " with SUM; ranks 0 and 2 all-reduce 4096 FP32 with SUM",
                verdict(3, r -> List.of(allReduce(fp32(r == 1 ? 4095 : 4096), ReduceOp.SUM))));
        assertEquals("transaction #41" + REFUSED + "the dtype of collective 1 differs: rank 2 all-reduces 4096 INT32"
                        + " with SUM; ranks 0 and 1 all-reduce 4096 FP32 with SUM",
                verdict(3, r -> List.of(allReduce(t(r == 2 ? DType.INT32 : DType.FP32, 4096), ReduceOp.SUM))));
        assertEquals("transaction #41" + REFUSED + "the op of collective 1 differs: rank 0 all-reduces 4096 FP32 with"
                        + " MAX; ranks 1 and 2 all-reduce 4096 FP32 with SUM",
                verdict(3, r -> List.of(allReduce(fp32(4096), r == 0 ? ReduceOp.MAX : ReduceOp.SUM))));
        assertEquals("transaction #41" + REFUSED + "the op of collective 1 differs: rank 2 all-reduces 4096 FP32 with"
                        + " SCALED_SUM(0.25); ranks 0 and 1 all-reduce 4096 FP32 with SCALED_SUM(0.5)",
                verdict(3, r -> List.of(allReduce(fp32(4096), ReduceOp.scaledSum(r == 2 ? 0.25 : 0.5)))));
        assertEquals("transaction #41" + REFUSED + "the root of collective 1 differs: rank 1 broadcasts 4096 FP32 from"
                        + " rank 1; ranks 0 and 2 broadcast 4096 FP32 from rank 0",
                verdict(3, r -> List.of(Command.of(Kind.BROADCAST, fp32(4096), fp32(4096), null, r == 1 ? 1 : 0))));
        assertEquals("transaction #41" + REFUSED + "the count and dtype of collective 1 differ: rank 1 reduce-scatters"
                        + " 100 INT32 per rank with SUM; ranks 0 and 2 reduce-scatter 99 FP32 per rank with SUM",
                verdict(3, r -> {
                    DType dtype = r == 1 ? DType.INT32 : DType.FP32;
                    long slot = r == 1 ? 100 : 99;
                    return List.of(Command.of(Kind.REDUCE_SCATTER, t(dtype, 3 * slot), t(dtype, slot), ReduceOp.SUM, 0));
                }));
    }

    @Test
    void anotherKindOrAMissingCollectiveIsNamedByPosition() {
        assertEquals("transaction #41" + REFUSED + "the kind of collective 2 differs: rank 1 broadcasts 8 FP32 from"
                        + " rank 0; ranks 0 and 2 all-reduce 8 FP32 with SUM",
                verdict(3, r -> List.of(allReduce(fp32(4), ReduceOp.SUM), r == 1
                        ? Command.of(Kind.BROADCAST, fp32(8), fp32(8), null, 0) : allReduce(fp32(8), ReduceOp.SUM))));
        assertEquals("transaction #41" + REFUSED + "the number of collectives differs: rank 2 has no collective 2;"
                        + " ranks 0 and 1 all-gather 4 FP32 per rank",
                verdict(3, r -> r == 2 ? List.of(allReduce(fp32(4), ReduceOp.SUM)) : List.of(allReduce(fp32(4),
                        ReduceOp.SUM), Command.of(Kind.ALL_GATHER, fp32(4), fp32(12), null, 0))));
    }

    @Test
    void groupsGoFromTheSmallestToTheLargestWithRunsOfRanks() {
        // world 8: ranks 3 and 6 differ, each in its own way
        assertEquals("transaction #41" + REFUSED + "the count of collective 1 differs: rank 3 all-reduces 1 FP32 with"
                        + " SUM; rank 6 all-reduces 2 FP32 with SUM; ranks 0 to 2, 4, 5 and 7 all-reduce 8 FP32 with SUM",
                verdict(8, r -> List.of(allReduce(fp32(r == 3 ? 1 : r == 6 ? 2 : 8), ReduceOp.SUM))));
    }

    @Test
    void sendsAreMatchedAgainstTheirReceivesPairwise() {
        // rank 0 sends 4096 to rank 2, which receives 4095 from it; rank 1 is not involved
        assertEquals("transaction #41" + REFUSED + "the count of send 1 from rank 0 to rank 2 differs: rank 0 sends"
                        + " 4096 FP32; rank 2 receives 4095 FP32",
                verdict(3, r -> switch (r) {
                    case 0 -> List.of(Command.of(Kind.SEND, fp32(4096), fp32(4096), null, 2));
                    case 2 -> List.of(Command.of(Kind.RECV, fp32(4095), fp32(4095), null, 0));
                    default -> List.of();
                }));
        assertEquals("transaction #41" + REFUSED + "the dtype of send 1 from rank 1 to rank 0 differs: rank 1 sends"
                        + " 16 INT32; rank 0 receives 16 FP32",
                verdict(2, r -> List.of(r == 1 ? Command.of(Kind.SEND, t(DType.INT32, 16), t(DType.INT32, 16), null, 0)
                        : Command.of(Kind.RECV, fp32(16), fp32(16), null, 1))));
        assertEquals("transaction #41" + REFUSED + "the number of sends from rank 0 to rank 1 differs: rank 0 sends 2"
                        + " times to rank 1; rank 1 receives once from rank 0",
                verdict(2, r -> r == 0 ? List.of(Command.of(Kind.SEND, fp32(4), fp32(4), null, 1),
                        Command.of(Kind.SEND, fp32(4), fp32(4), null, 1))
                        : List.of(Command.of(Kind.RECV, fp32(4), fp32(4), null, 0))));
    }

    @Test
    void unevenCountsAreMatchedPairwise() {
        // every rank sends and expects 4 elements per peer, but rank 0 sends 5 to rank 2
        assertEquals("transaction #41" + REFUSED + "the counts of collective 1 (an uneven all-to-all) differ: rank 0"
                        + " sends 5 FP32 to rank 2; rank 2 receives 4 FP32 from rank 0",
                verdict(3, r -> List.of(Command.counted(Kind.UNEVEN_ALL_TO_ALL, fp32(100),
                        r == 0 ? new long[] {4, 4, 5} : new long[] {4, 4, 4}, fp32(100), new long[] {4, 4, 4}))));
        assertEquals("transaction #41" + REFUSED + "the counts of collective 1 differ: rank 1 all-gathers FP32 blocks"
                        + " of [1, 3, 3]; ranks 0 and 2 all-gather FP32 blocks of [1, 2, 3]",
                verdict(3, r -> List.of(Command.counted(Kind.ALL_GATHER_V, fp32(r + 1), null, fp32(7),
                        r == 1 ? new long[] {1, 3, 3} : new long[] {1, 2, 3}))));
    }

    @Test
    void labelsThatDifferAreNamedAndForeignBytesAreRefused() {
        List<byte[]> gathered = new ArrayList<>();
        for (int r = 0; r < 3; r++) {
            gathered.add(CommandFingerprints.encode(r == 1 ? "transaction #40" : "transaction #41",
                    List.of(allReduce(fp32(r == 1 ? 2 : 1), ReduceOp.SUM))));
        }
        assertEquals("transaction #41 on ranks 0 and 2, transaction #40 on rank 1" + REFUSED + "the count of collective 1 differs:"
                + " rank 1 all-reduces 2 FP32 with SUM; ranks 0 and 2 all-reduce 1 FP32 with SUM",
                CommandFingerprints.verdict(gathered));
        gathered.set(2, new byte[] {1, 2, 3});
        assertEquals("the consistency check (jnccl.debug=detail) got no fingerprint of the commands from rank 2 but"
                + " other bytes (that rank made another host-side call: turn the check on for every rank alike, or"
                + " for none)", CommandFingerprints.verdict(gathered));
        // a fingerprint with bytes after it is no fingerprint either
        byte[] good = CommandFingerprints.encode("x", List.of());
        byte[] longer = java.util.Arrays.copyOf(good, good.length + 1);
        assertNull(CommandFingerprints.decode(longer));
    }

    @Test
    void theSettingTakesDetailOrOffInAnyCaseAndRefusesTheRest() {
        List<String> values = List.of("detail", "off");
        Map<String, String> none = Map.of();
        assertNull(OptionChecks.setting("jnccl.debug", "JNCCL_DEBUG", values, none::get, none::get));
        assertEquals("detail", OptionChecks.setting("jnccl.debug", "JNCCL_DEBUG", values,
                Map.of("jnccl.debug", " DeTail ")::get, Map.of("JNCCL_DEBUG", "off")::get));
        // the property wins; a blank one leaves the variable
        assertEquals("off", OptionChecks.setting("jnccl.debug", "JNCCL_DEBUG", values,
                Map.of("jnccl.debug", " ")::get, Map.of("JNCCL_DEBUG", "OFF")::get));
        IllegalArgumentException property = assertThrows(IllegalArgumentException.class, () -> OptionChecks.setting(
                "jnccl.debug", "JNCCL_DEBUG", values, Map.of("jnccl.debug", "verbose")::get, none::get));
        assertEquals("jnccl.debug (system property) is \"verbose\": expected detail or off (any case), or unset",
                property.getMessage());
        IllegalArgumentException variable = assertThrows(IllegalArgumentException.class, () -> OptionChecks.setting(
                "jnccl.debug", "JNCCL_DEBUG", values, none::get, Map.of("JNCCL_DEBUG", "1")::get));
        assertEquals("JNCCL_DEBUG (environment variable) is \"1\": expected detail or off (any case), or unset",
                variable.getMessage());
    }

    @Test
    void theOptionIsOffByDefaultAndKeptByTheOtherWithers() {
        CommunicatorOptions on = CommunicatorOptions.defaults().withConsistencyChecks(true);
        assertEquals(false, CommunicatorOptions.defaults().consistencyChecks());
        assertEquals(true, on.consistencyChecks());
        assertEquals(true, on.withName("x").withCTAs(1, 2).withoutWatchdog().consistencyChecks());
        assertEquals(false, on.withConsistencyChecks(false).consistencyChecks());
        assertEquals(CommunicatorOptions.defaults(), on.withConsistencyChecks(false));
    }
}
