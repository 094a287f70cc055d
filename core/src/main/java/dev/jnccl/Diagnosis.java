package dev.jnccl;

import java.io.Serializable;
import java.util.List;
import java.util.Objects;

/**
 * Why a communicator was aborted after a hang or a failure, as the ranks told it: when the watchdog
 * aborts (a transaction not complete in time, an enqueue held inside NCCL, a host-side wait past its
 * deadline, a peer that closed early) the ranks exchange {@linkplain RankSummary summaries} over a
 * channel of their launcher that does not need NCCL, and the verdict names the culprit. The verdict
 * is the first line of the abort reason, hence of every {@link CommunicatorAbortedException} that
 * follows on every rank the launcher reaches ({@link CommunicatorAbortedException#diagnosis()} gives
 * this object).
 *
 * <p>The forms of the verdict:
 * <ul>
 *   <li>{@code rank 2 never reached transaction #41 (it is in user code: at Trainer.step(Trainer.java:88))}:
 *       a rank lags or skipped a collective (also {@code never reached barrier} for host-side calls);</li>
 *   <li>{@code transaction #41 differs: ranks 0,1,3 allReduce SUM FP32 4096 elements (16384 bytes),
 *       rank 2 allReduce SUM FP32 4095 elements (16380 bytes)}: the ranks called different collectives;</li>
 *   <li>{@code rank 3 closed its communicator after 40 transaction(s)}: a rank left early;</li>
 *   <li>{@code rank 3 gave no summary: its process is gone}: no summary came from it in time;</li>
 *   <li>{@code rank 1 is held inside its enqueue of transaction #41 ...} and {@code every rank is inside
 *       transaction #41 with the same commands: NCCL or the transport is stuck (...)}: jnccl's callers
 *       did the same thing everywhere;</li>
 *   <li>{@code rank 0's view only (no channel to the other ranks): ...}: the launcher has no channel
 *       to the other ranks ({@link Communicator#initRank}), so only this rank's own state is known.</li>
 * </ul>
 *
 * @param verdict   one line naming the culprit
 * @param summaries the summaries the verdict was made from, in rank order (one per rank when the
 *                  launcher has a channel, ranks that gave none as {@link RankSummary.Status#ABSENT};
 *                  only the diagnosing rank's own otherwise)
 * @param complete  whether every rank answered
 */
public record Diagnosis(String verdict, List<RankSummary> summaries, boolean complete) implements Serializable {

    /** Checks the verdict (one line) and copies the summaries. */
    public Diagnosis {
        Objects.requireNonNull(verdict, "Diagnosis: verdict is null");
        if (verdict.isBlank() || verdict.indexOf('\n') >= 0) {
            throw new IllegalArgumentException("Diagnosis: the verdict must be one non-blank line, got \"" + verdict
                    + "\"");
        }
        summaries = List.copyOf(summaries);
    }

    /** {@return the verdict, then every summary (for logs)} */
    public String describe() {
        StringBuilder sb = new StringBuilder(verdict);
        sb.append("\n  ").append(complete ? "every rank answered" : "not every rank answered").append(':');
        for (RankSummary summary : summaries) {
            sb.append("\n  ").append(summary.describe().replace("\n", "\n  "));
        }
        return sb.toString();
    }
}
