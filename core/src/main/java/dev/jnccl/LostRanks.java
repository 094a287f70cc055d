package dev.jnccl;

import dev.jnccl.spi.Failures;
import java.util.List;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What one communicator's launcher says of lost ranks ({@link Failures#lostRanks}): the exception of
 * a call that finds the communicator aborted is {@link RankLostException}, which can recover, when
 * the launcher names lost ranks other than this one, else {@link CommunicatorAbortedException}.
 */
final class LostRanks {
    private static final Logger LOG = LoggerFactory.getLogger(LostRanks.class);

    private final Communicator face;
    private final Failures failures;
    private final int rank;
    private final int worldSize;

    LostRanks(Communicator face, Failures failures, int rank, int worldSize) {
        this.face = face;
        this.failures = failures;
        this.rank = rank;
        this.worldSize = worldSize;
    }

    /** The exception of a call that finds the communicator aborted. */
    CommunicatorAbortedException aborted(String message, Throwable cause, Diagnosis known) {
        List<Integer> lost = lost();
        return lost.isEmpty() ? new CommunicatorAbortedException(message, cause, known)
                : new RankLostException(withHint(message, lost), cause, known, face, lost);
    }

    /** {@code failure} as {@link RankLostException} when it is an abort and ranks were lost. */
    RuntimeException or(RuntimeException failure) {
        if (failure instanceof CommunicatorAbortedException aborted && !(failure instanceof RankLostException)) {
            List<Integer> lost = lost();
            if (!lost.isEmpty()) {
                return new RankLostException(withHint(aborted.getMessage(), lost), aborted,
                        aborted.diagnosis().orElse(null), face, lost);
            }
        }
        return failure;
    }

    private static String withHint(String message, List<Integer> lost) {
        return message + "\n  lost ranks " + lost + " (recover with RankLostException.recover())";
    }

    /** The launcher's lost ranks, when they make a recovery: in range, not this rank; sorted; else empty. */
    List<Integer> lost() {
        List<Integer> lost;
        try {
            lost = failures.lostRanks();
        } catch (RuntimeException e) {
            LOG.warn("rank {}: the launcher's lost ranks could not be read", rank, e);
            return List.of();
        }
        if (lost == null || lost.isEmpty() || lost.contains(rank)) {
            return List.of();
        }
        try {
            return Shrinks.checkExcluded(lost.stream().mapToInt(Integer::intValue).toArray(), rank, worldSize);
        } catch (IllegalArgumentException e) {
            LOG.warn("rank {}: the launcher's lost ranks {} are not a recovery: {}", rank, lost, e.getMessage());
            return List.of();
        }
    }
}
