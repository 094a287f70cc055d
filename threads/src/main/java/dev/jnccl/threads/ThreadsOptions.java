package dev.jnccl.threads;

import dev.jnccl.CommunicatorOptions;
import dev.jnccl.internal.OptionChecks;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.function.Consumer;

/**
 * Options of threads mode.
 *
 * @param communicator    options of each rank's communicator (deadlines, watchdog)
 * @param memcpyAllGather run the all-gathers of transactions as device-to-device copies
 *                        (cudaMemcpyAsync on the comms stream: copy engines, no SMs) instead of NCCL
 * @param memcpySendRecv  run the sends and receives of transactions as device-to-device copies;
 *                        the destructive all-to-all always uses NCCL
 * @param maxLead         how many transactions one rank's thread may run ahead of the slowest rank
 *                        before it waits (see {@link ThreadsCommunicators}; 1 to 65536, default 8)
 * @param pinCpus         pin each rank's thread to the CPUs local to its GPU when NVML is available
 * @param devices         the device of each rank (index = rank); empty (the default) means one rank
 *                        per device, rank r on device r. Several ranks may share a device; each device
 *                        must be 0 or more, and below the number of visible devices at launch
 * @param minWorld        0 (the default): a rank that fails fails the pack. 1 or more: the pack
 *                        continues without a failed rank while at least {@code minWorld} ranks remain
 *                        (see {@link #withContinueWithoutFailedRanks(int)}); at most the pack's size,
 *                        checked at launch
 * @param replacementDevices the spare devices (empty, the default: none): with {@code minWorld} on, a
 *                        lost rank is replaced by a new rank on the next spare device (see
 *                        {@link #withReplacementDevices(int...)}); each 0 or more, below the number of
 *                        visible devices at launch
 */
public record ThreadsOptions(CommunicatorOptions communicator, boolean memcpyAllGather, boolean memcpySendRecv,
                             int maxLead, boolean pinCpus, List<Integer> devices, int minWorld,
                             List<Integer> replacementDevices) {
    private static final String NAME = "ThreadsOptions";
    /** The largest lead: beyond it a rank could queue so much work that the throttle means nothing. */
    private static final int MAX_LEAD = 65_536;

    /**
     * Checks the values: communicator options and devices given, a lead of 1 to 65536, no null or
     * negative device (also among the replacement devices), a minimum world of 0 or more; the
     * lists are copied.
     *
     * @throws NullPointerException     naming the option that is null
     * @throws IllegalArgumentException naming the option, its value and the allowed range
     */
    public ThreadsOptions {
        OptionChecks.given(NAME, communicator, "communicator options are null");
        OptionChecks.range(NAME, "maxLead", maxLead, 1, MAX_LEAD);
        devices = checkedDevices(devices, "rank", "devices");
        OptionChecks.range(NAME, "minWorld", minWorld, 0, Integer.MAX_VALUE);
        OptionChecks.given(NAME, replacementDevices, "replacementDevices is null (an empty list means none)");
        replacementDevices = checkedDevices(replacementDevices, "spare", "replacementDevices");
    }

    /**
     * The options without replacement devices, as before the pack could replace lost ranks.
     *
     * @param communicator    options of each rank's communicator
     * @param memcpyAllGather run the all-gathers of transactions as device-to-device copies
     * @param memcpySendRecv  run the sends and receives of transactions as device-to-device copies
     * @param maxLead         how many transactions a rank may run ahead (1 to 65536)
     * @param pinCpus         pin each rank's thread to the CPUs local to its GPU
     * @param devices         the device of each rank; empty means one rank per device
     * @param minWorld        the fewest ranks the pack continues with, or 0 for off
     */
    public ThreadsOptions(CommunicatorOptions communicator, boolean memcpyAllGather, boolean memcpySendRecv,
                          int maxLead, boolean pinCpus, List<Integer> devices, int minWorld) {
        this(communicator, memcpyAllGather, memcpySendRecv, maxLead, pinCpus, devices, minWorld, List.of());
    }

    /**
     * The options without a minimum world (a rank that fails fails the pack), as before the pack
     * could continue without failed ranks.
     *
     * @param communicator    options of each rank's communicator
     * @param memcpyAllGather run the all-gathers of transactions as device-to-device copies
     * @param memcpySendRecv  run the sends and receives of transactions as device-to-device copies
     * @param maxLead         how many transactions a rank may run ahead (1 to 65536)
     * @param pinCpus         pin each rank's thread to the CPUs local to its GPU
     * @param devices         the device of each rank; empty means one rank per device
     */
    public ThreadsOptions(CommunicatorOptions communicator, boolean memcpyAllGather, boolean memcpySendRecv,
                          int maxLead, boolean pinCpus, List<Integer> devices) {
        this(communicator, memcpyAllGather, memcpySendRecv, maxLead, pinCpus, devices, 0, List.of());
    }

    /** A copy of {@code devices}; List.copyOf alone would throw a NullPointerException without a message. */
    private static List<Integer> checkedDevices(List<Integer> devices, String of, String option) {
        OptionChecks.given(NAME, devices, "devices is null (an empty list means one rank per device)");
        List<Integer> copy = new ArrayList<>(devices);
        for (int rank = 0; rank < copy.size(); rank++) {
            Integer device = copy.get(rank);
            if (device == null) {
                throw OptionChecks.missing(NAME, "the device of " + of + " " + rank + " is null in " + option + " "
                        + copy);
            }
            if (device < 0) {
                throw OptionChecks.negative(NAME, "device " + device + " of " + of + " " + rank);
            }
        }
        return List.copyOf(copy);
    }

    /**
     * The defaults.
     *
     * @return NCCL transports, default communicator options, a lead of 8 transactions, CPU pinning on,
     *         one rank per device, a failing rank fails the pack
     */
    public static ThreadsOptions defaults() {
        return new ThreadsOptions(CommunicatorOptions.defaults(), false, false, 8, true, List.of(), 0, List.of());
    }

    /**
     * A mutable copy of these options (each field starts as the value of this record's accessor of
     * the same name), which a {@code with*} method changes one value of; the constructor checks them all.
     */
    private final class Copy {
        CommunicatorOptions communicator = communicator();
        boolean memcpyAllGather = memcpyAllGather();
        boolean memcpySendRecv = memcpySendRecv();
        int maxLead = maxLead();
        boolean pinCpus = pinCpus();
        List<Integer> devices = devices();
        int minWorld = minWorld();
        List<Integer> replacementDevices = replacementDevices();
    }

    private ThreadsOptions with(Consumer<Copy> change) {
        Copy copy = new Copy();
        change.accept(copy);
        return new ThreadsOptions(copy.communicator, copy.memcpyAllGather, copy.memcpySendRecv, copy.maxLead,
                copy.pinCpus, copy.devices, copy.minWorld, copy.replacementDevices);
    }

    /**
     * These options with other communicator options.
     *
     * @param options options of each rank's communicator
     * @return a copy with {@code communicator} replaced
     */
    public ThreadsOptions withCommunicator(CommunicatorOptions options) {
        return with(c -> c.communicator = options);
    }

    /**
     * These options with the all-gathers as device-to-device copies, or not.
     *
     * @param enabled whether all-gathers use cudaMemcpyAsync
     * @return a copy with {@code memcpyAllGather} replaced
     */
    public ThreadsOptions withMemcpyAllGather(boolean enabled) {
        return with(c -> c.memcpyAllGather = enabled);
    }

    /**
     * These options with the sends and receives as device-to-device copies, or not.
     *
     * @param enabled whether sends and receives use cudaMemcpyAsync
     * @return a copy with {@code memcpySendRecv} replaced
     */
    public ThreadsOptions withMemcpySendRecv(boolean enabled) {
        return with(c -> c.memcpySendRecv = enabled);
    }

    /**
     * These options with another launch-queue lead.
     *
     * @param lead how many transactions a rank may run ahead (1 to 65536)
     * @return a copy with {@code maxLead} replaced
     */
    public ThreadsOptions withMaxLead(int lead) {
        return with(c -> c.maxLead = lead);
    }

    /**
     * These options with CPU pinning on or off.
     *
     * @param pin whether to pin rank threads to their GPU's CPUs
     * @return a copy with {@code pinCpus} replaced
     */
    public ThreadsOptions withPinCpus(boolean pin) {
        return with(c -> c.pinCpus = pin);
    }

    /**
     * These options with rank r on device {@code deviceOfRank[r]}. The array is copied. Each device
     * must be 0 or more (checked here); that it is below the number of visible devices is checked by
     * {@link ThreadsCommunicators#launch}, whose {@code gpus} must then be 0 or
     * {@code deviceOfRank.length}: the pack has one rank per entry. Several ranks may name the same
     * device (e.g. {@code withDevices(0, 0, 0, 0)}: four ranks on device 0): the host emulation
     * allows it; real NCCL needs 2.30 or newer with {@code NCCL_MULTI_RANK_GPU_ENABLE=1} (2.28
     * refuses ranks of one process on one GPU, and launch then says so). No arguments go back to
     * the default, one rank per device (rank r on device r).
     *
     * @param deviceOfRank the device of each rank, index = rank (none: one rank per device)
     * @return a copy with {@code devices} replaced
     * @throws NullPointerException     when {@code deviceOfRank} is null
     * @throws IllegalArgumentException when a device is negative, naming it and its rank
     */
    public ThreadsOptions withDevices(int... deviceOfRank) {
        OptionChecks.given("withDevices", deviceOfRank, "deviceOfRank is null");
        List<Integer> devices = Arrays.stream(deviceOfRank).boxed().toList();
        return with(c -> c.devices = devices);
    }

    /**
     * These options with the pack continuing without a rank that fails, while at least
     * {@code minWorld} ranks remain; 0 turns it off (the default: a failing rank fails the pack).
     *
     * <p>A rank is <i>lost</i> when its work throws, or when its thread is interrupted (a wait of
     * the pack's host side ends with the interrupt, or NCCL's wait is aborted for it). The pack then
     * aborts every other rank's communicator with the loss: their next jnccl call on it (or the one
     * they are in) throws {@link dev.jnccl.RankLostException}, whose {@code recover()} gives the
     * survivors' communicator (ranks renumbered in the order of their old ranks), collectively among
     * the survivors. The survivors' threads are not interrupted: they learn of the loss from jnccl.
     * {@link ThreadsPack#join()} returns normally once every survivor's work returned;
     * {@link ThreadsPack#lostRanks()} says which ranks were lost and why. A loss that would leave fewer
     * than {@code minWorld} ranks fails the pack as without this option, its exception naming every
     * lost rank. A rank that hangs is lost when the watchdog's diagnosis names it as never having
     * reached the call the others wait in: its thread is interrupted, which ends an interruptible wait
     * of its user code (one that ignores the interrupt keeps its thread; the survivors go on anyway).
     * Other verdicts (a mismatch, NCCL stuck everywhere) fail the pack as before.
     *
     * @param minWorld the fewest ranks the pack continues with (1 to the pack's size, checked at
     *                 launch), or 0 for off
     * @return a copy with {@code minWorld} replaced
     * @throws IllegalArgumentException when {@code minWorld} is negative
     */
    public ThreadsOptions withContinueWithoutFailedRanks(int minWorld) {
        return with(c -> c.minWorld = minWorld);
    }

    /**
     * Spare devices for replacement ranks: with {@link #withContinueWithoutFailedRanks(int)} on, each
     * lost rank, while a spare device is left, is replaced. Its survivors' {@link
     * dev.jnccl.RankLostException#recover()} shrinks their communicator and grows it back to its
     * size ({@link dev.jnccl.Communicator#grow}): the survivors first, in the order of their ranks,
     * the replacement last; the pack starts the replacement's thread ({@code jnccl-rank-<r>-replacement})
     * on the next spare device, with the grown communicator, running the same work, in which
     * {@link ThreadsCommunicators#isReplacement()} is true (so that it loads its state from a healthy
     * peer, e.g. by a broadcast the survivors make after recovering). {@link ThreadsPack#join()} waits
     * for the replacements too; {@link ThreadsPack#replacementDevices()} says where they ran. Without
     * spares left, the survivors go on alone, as without this option.
     *
     * @param devices the spare devices, used in this order (none: off)
     * @return a copy with the replacement devices replaced
     * @throws NullPointerException     when {@code devices} is null
     * @throws IllegalArgumentException when a device is negative
     */
    public ThreadsOptions withReplacementDevices(int... devices) {
        OptionChecks.given("withReplacementDevices", devices, "devices is null");
        List<Integer> spares = Arrays.stream(devices).boxed().toList();
        return with(c -> c.replacementDevices = spares);
    }

    /** Whether a rank that fails is lost instead of failing the pack. */
    boolean continuesWithoutFailedRanks() {
        return minWorld > 0;
    }

    /** Whether two ranks share a device. */
    boolean sharesDevices() {
        return devices.stream().distinct().count() < devices.size();
    }

    boolean usesMemcpy() {
        return memcpyAllGather || memcpySendRecv;
    }
}
