package dev.jnccl;

import dev.jnccl.internal.OptionChecks;
import dev.jnccl.spi.Command;
import dev.jnccl.spi.HostSide;
import dev.jnccl.spi.NcclHostSide;
import java.util.List;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The consistency check of one communicator ({@link CommunicatorOptions#withConsistencyChecks},
 * or the setting {@code jnccl.debug=detail}): before a transaction, a convenience operation or a
 * graph replay goes to NCCL, every rank gives the fingerprint of its commands to the launcher's
 * host all-gather of the checks ({@link HostSide#consistencyCheck}, {@link CommandFingerprints}); a difference aborts the communicator with the
 * verdict, which every rank computes alike from the same bytes, so every rank aborts with it
 * before NCCL runs anything of the step. Exists only while the check is on: the pipeline's one
 * null test is all it costs otherwise.
 */
final class ConsistencyCheck {
    private static final Logger LOG = LoggerFactory.getLogger(Communicator.class);
    /** The system property of the setting: {@value}. */
    static final String PROPERTY = "jnccl.debug";
    /** The environment variable of the setting, read when the property is unset: {@value}. */
    static final String VARIABLE = "JNCCL_DEBUG";
    private static final List<String> VALUES = List.of("detail", "off");

    private final Communicator face;
    private final HostSide host;
    /** The bound of the exchange: the host side's (the watchdog's timeout). */
    private final long timeoutNanos;

    private ConsistencyCheck(Communicator face, HostSide host, long timeoutNanos) {
        this.face = face;
        this.host = host;
        this.timeoutNanos = timeoutNanos;
    }

    /**
     * The check of a new communicator, or null when there is none: neither the options nor the
     * setting ask for it, the world has one rank (nothing to compare), or the host side runs over
     * the communicator's own NCCL ({@link NcclHostSide}: {@link Communicator#initRank}, Spark), where
     * an exchange from inside a transaction would be a transaction itself; then it is skipped with a
     * WARN line rather than refused, so that a setting made for a whole job does not break these
     * ranks. The communicator asks before anything native, so that a refused setting leaves nothing
     * to release.
     *
     * @throws IllegalArgumentException when the setting has a value other than detail or off
     */
    static ConsistencyCheck of(Communicator face, CommunicatorOptions options, HostSide host, int rank, int worldSize,
                               long timeoutNanos) {
        boolean byOptions = options.consistencyChecks();
        if (!settingSaysDetail() && !byOptions) {
            return null;
        }
        String asked = byOptions ? "CommunicatorOptions.withConsistencyChecks(true)" : PROPERTY + "=detail";
        if (host instanceof NcclHostSide) {
            LOG.warn("rank {} of {}: {} asks for consistency checks, but this communicator's host-side calls run over"
                    + " its own NCCL (Communicator.initRank, Spark barrier mode): the check needs a host channel"
                    + " between the ranks, so its transactions are not checked", rank, worldSize, asked);
            return null;
        }
        if (worldSize == 1) {
            return null;
        }
        if (rank == 0) {
            LOG.info("consistency checks on ({}): the {} ranks compare every transaction's commands before NCCL"
                    + " runs them, one host all-gather per transaction", asked, worldSize);
        }
        return new ConsistencyCheck(face, host, timeoutNanos);
    }

    /** {@return whether {@code jnccl.debug} (or {@code JNCCL_DEBUG}) is detail} */
    static boolean settingSaysDetail() {
        return "detail".equals(OptionChecks.setting(PROPERTY, VARIABLE, VALUES));
    }

    /**
     * Compares {@code commands} with the other ranks' of the same step; returns when they match.
     *
     * @param label     what the verdict calls the work ("transaction #41")
     * @param operation the operation whose exception reports an abort ("execute", "launch")
     * @throws CommunicatorAbortedException with the verdict (the communicator aborted), or when the
     *         exchange itself failed (a rank missing past the timeout, an interrupt, a failed peer)
     */
    void verify(String label, List<Command> commands, String operation) {
        List<byte[]> all;
        // A summary taken meanwhile says the rank waits in the check (a peer that skipped the step never came).
        int before = face.forensics().enter(Forensics.CHECK);
        try {
            all = host.consistencyCheck(CommandFingerprints.encode(label, commands), timeoutNanos);
        } finally {
            face.forensics().exit(before);
        }
        String verdict = CommandFingerprints.verdict(all);
        if (verdict != null) {
            face.abort(verdict);
            face.requireUsable(operation); // throws, with the reason the abort recorded
        }
    }
}
