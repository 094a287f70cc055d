package dev.jnccl.spi;

import dev.jnccl.Communicator;
import dev.jnccl.Diagnosis;
import dev.jnccl.RankSummary;
import java.util.List;
import java.util.Objects;
import java.util.function.BiFunction;
import java.util.function.Function;

/**
 * What a launcher needs to take part in the diagnosis of an abort (see {@link Diagnosis} and
 * {@link Failures#summaries}): a communicator's summary, a diagnosis made on a rank's own thread
 * (a host-side wait of the launcher's that passed its deadline), summaries of ranks that gave none,
 * and the verdict put first in a reason.
 */
public final class Diagnoses {
    private static volatile Function<Communicator, RankSummary> summaries;
    private static volatile BiFunction<Communicator, String, Diagnosis> diagnoses;

    private Diagnoses() {}

    /**
     * Called once by {@link Communicator}'s class initializer (as {@link Modes#install}): how to ask a
     * communicator for its summary and for a diagnosis.
     *
     * @param summary  a communicator's summary
     * @param diagnose a communicator's diagnosis of an abort about to happen, for a trigger
     * @throws IllegalStateException on any later call
     */
    public static synchronized void install(Function<Communicator, RankSummary> summary,
                                            BiFunction<Communicator, String, Diagnosis> diagnose) {
        if (summaries != null) {
            throw new IllegalStateException("Diagnoses.install: installed once, by Communicator");
        }
        diagnoses = Objects.requireNonNull(diagnose, "Diagnoses.install: diagnose is null");
        summaries = Objects.requireNonNull(summary, "Diagnoses.install: summary is null");
    }

    /**
     * The summary of {@code communicator}'s rank now: a snapshot, readable from any thread, that never
     * waits for the rank (a stuck rank is described as it is).
     *
     * @param communicator the communicator
     * @return its summary
     */
    public static RankSummary summary(Communicator communicator) {
        return summaries.apply(communicator);
    }

    /**
     * A diagnosis made by {@code communicator}'s rank before it aborts for {@code trigger} (a launcher's
     * host-side wait past its deadline): summaries through its {@link Failures}, the verdict, the
     * ERROR log and the JFR event, as for a watchdog's abort. Call it with no lock held that another
     * rank's summary could need.
     *
     * @param communicator the communicator about to be aborted
     * @param trigger      why it is aborted
     * @return the diagnosis (a peer's, when one came first)
     */
    public static Diagnosis diagnose(Communicator communicator, String trigger) {
        return diagnoses.apply(communicator, trigger);
    }

    /**
     * The summary of a rank that gave none.
     *
     * @param rank      the rank
     * @param worldSize the number of ranks
     * @param why       why, as a clause ({@code "its process is gone"})
     * @return a summary of status {@link RankSummary.Status#ABSENT}
     */
    public static RankSummary absent(int rank, int worldSize, String why) {
        return new RankSummary(rank, worldSize, RankSummary.Status.ABSENT, why, 0, 0, List.of(),
                RankSummary.Activity.UNKNOWN, "", "", "", List.of());
    }

    /**
     * {@code summary} of a rank that the launcher knows starts no more transactions although its
     * communicator is still open (threads mode: its work returned, the launcher closes it later).
     *
     * @param summary the communicator's summary
     * @param why     why, as a clause ({@code "its work returned"})
     * @return the summary with status {@link RankSummary.Status#CLOSING}, unchanged when it is not open
     */
    public static RankSummary leaving(RankSummary summary, String why) {
        if (summary.status() != RankSummary.Status.OPEN) {
            return summary;
        }
        return new RankSummary(summary.rank(), summary.worldSize(), RankSummary.Status.CLOSING, why,
                summary.executed(), summary.completed(), summary.pending(), summary.activity(), summary.call(),
                summary.thread(), summary.location(), summary.stack());
    }

    /**
     * {@code text} with the verdict of {@code diagnosis} as its first line (once: a verdict inside it,
     * as in a peer's reason, is taken out), so that every message of the abort starts with it.
     *
     * @param diagnosis the diagnosis, or null
     * @param text      a reason or a message
     * @return the text led by the verdict; {@code text} itself when {@code diagnosis} is null
     */
    public static String lead(Diagnosis diagnosis, String text) {
        if (diagnosis == null) {
            return text;
        }
        String verdict = diagnosis.verdict();
        if (text.startsWith(verdict + "\n")) {
            return text;
        }
        return verdict + "\n" + text.replace(verdict + "\n", "");
    }
}
