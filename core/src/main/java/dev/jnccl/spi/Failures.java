package dev.jnccl.spi;

import dev.jnccl.Communicator;
import dev.jnccl.Diagnosis;
import dev.jnccl.RankSummary;
import java.util.List;

/**
 * How a failure of one rank reaches the others: what the launcher knows about failed peers (asked
 * while waiting, and by the watchdog), and what it does when this rank's communicator is aborted.
 * Every method does nothing by default, for a launcher with no side channel between the ranks
 * (those ranks learn of a failure only as NCCL reports it, or from their own watchdog). Threads
 * mode fails the whole pack and releases its ranks; MPI mode ends the job.
 *
 * <p>A hang is diagnosed before the abort (see {@link Diagnosis}): the rank whose watchdog fires, or
 * whose host-side wait passes its deadline, asks {@link #diagnosis} whether a peer already diagnosed
 * the failure, else gathers every rank's summary through {@link #summaries} (a channel that does not
 * need NCCL) and hands its diagnosis to {@link #diagnosed}; ranks aborted afterwards attach
 * {@link #diagnosis} to their own abort. By default a launcher has no such channel: the diagnosis is
 * this rank's view only, and each rank diagnoses alone.
 *
 * <p>An abort calls, on the aborting thread: {@link #explainAbort}, then (once per communicator)
 * {@link #aborting}, NCCL's abort, {@link #aborted}. A call that later finds the communicator
 * aborted calls {@link #beforeAbortedException} on its own thread before it throws.
 */
public interface Failures {

    /** The failure handling of a launcher with no side channel between the ranks. */
    Failures NONE = new Failures() {};

    /**
     * Polled while this rank waits for the others to create or split a communicator: a non-null
     * answer (another rank already failed) ends the wait with that reason.
     *
     * @return why waiting is pointless, or null
     */
    default String cancellation() {
        return null;
    }

    /**
     * Polled by the watchdog every interval (with the communicator's lock not held): a reason to
     * abort now from what the launcher knows about the other ranks, or null. MPI mode answers when
     * another rank closed its communicator after fewer transactions than this rank executed while
     * this rank's work has been pending for a while: this rank waits for a collective that rank
     * will never join.
     *
     * @param executed     the transactions this rank has executed (one whose enqueue has started counts)
     * @param pendingNanos how long the oldest incomplete transaction has been pending, or this rank has
     *                     been inside an enqueue (real NCCL connects to peers in the first collectives),
     *                     whichever is longer; -1 when neither
     * @return why to abort, or null
     */
    default String poll(long executed, long pendingNanos) {
        return null;
    }

    /**
     * The reason to record for an abort: a launcher that knows an earlier root cause (another rank
     * failed first) puts it in front, so that every rank's exception names the rank that failed.
     * Called on every {@link Communicator#abort}, also on one that finds the communicator no
     * longer open.
     *
     * @param reason the reason given to {@link Communicator#abort}
     * @return the reason to record and report
     */
    default String explainAbort(String reason) {
        return reason;
    }

    /**
     * Called once when the communicator is aborted, before NCCL's abort: release threads waiting on
     * the host side and tell the other ranks.
     *
     * @param reason the recorded reason
     */
    default void aborting(String reason) {}

    /**
     * Called once after NCCL's abort has returned, on the aborting thread (MPI mode ends the job
     * here, so that peers blocked in NCCL do not hang).
     *
     * @param reason the recorded reason
     */
    default void aborted(String reason) {}

    /**
     * Called on a thread that is about to get {@link dev.jnccl.CommunicatorAbortedException}
     * (possibly holding the communicator's lock: must not wait for the communicator): threads mode
     * waits here, bounded, until no peer still copies from this rank's buffers, so that the caller
     * may free them once the exception arrives.
     *
     * @param reason the recorded reason
     */
    default void beforeAbortedException(String reason) {}

    /**
     * The ranks of this communicator that the launcher knows to be lost (a failed or interrupted
     * rank thread, a dead process), in this communicator's numbering, sorted; empty by default. It is
     * how a launcher aborts a communicator "with these ranks lost": it makes this answer them, then
     * aborts the communicator ({@link Communicator#abort}); from then on every call that finds the
     * communicator aborted (also one aborted earlier, by its watchdog or NCCL's error) throws
     * {@link dev.jnccl.RankLostException} instead of {@link dev.jnccl.CommunicatorAbortedException},
     * and the survivors recover with {@link Communicator#shrink}. Asked only on the way to such an
     * exception, on any thread, possibly holding the communicator's lock: must not wait.
     *
     * @return the lost ranks, sorted, or an empty list
     */
    default List<Integer> lostRanks() {
        return List.of();
    }

    /**
     * How many ranks the launcher starts in place of {@code lostRanks} (this communicator's lost
     * ranks, as {@link #lostRanks} named them) once the survivors have shrunk: {@link
     * dev.jnccl.RankLostException#recover()} then grows the survivors' communicator by that many
     * ranks (the new ones last, see {@link Communicator#grow}); 0, the default, for none. Every
     * survivor must get the same answer for the same loss, also when it asks again.
     *
     * @param lostRanks the lost ranks being recovered from
     * @return the number of replacement ranks, 0 or more
     */
    default int replacements(List<Integer> lostRanks) {
        return 0;
    }

    /**
     * Starts the replacement ranks of a recovery ({@link #replacements}), which join the grown
     * communicator with {@link Modes#joinGrow} and {@code ticket}: asked on the survivors'
     * communicator, by its rank 0, once the ticket is made; asked again with the same ticket when a
     * recovery is repeated (start them once). Must not wait for the new ranks.
     *
     * @param ticket the grow's ticket: the new ranks are {@code [ticket.fromWorld(), ticket.toWorld())}
     */
    default void replace(dev.jnccl.GrowTicket ticket) {}

    /**
     * Every rank's summary for the diagnosis of an abort, gathered over a channel that does not need
     * NCCL (the NCCL communicator may be stuck), within {@code timeoutNanos}: a rank that does not
     * answer in time is given as absent ({@link Diagnoses#absent}), never waited for beyond it. The
     * default has no channel and answers this rank's own summary only (the verdict then says it is
     * this rank's view only). Called on the diagnosing thread (the watchdog's, or a rank's own after a
     * host-side deadline), with no lock of the communicator held.
     *
     * @param own          this rank's summary
     * @param timeoutNanos how long the exchange may take
     * @return one summary per rank in rank order, or {@code List.of(own)}
     */
    default List<RankSummary> summaries(RankSummary own, long timeoutNanos) {
        return List.of(own);
    }

    /**
     * Called with the diagnosis this rank made, before it aborts: a launcher hands it to the ranks it
     * reaches, which attach it to their own aborts ({@link #diagnosis}). When a diagnosis of the same
     * failure came first (two ranks' watchdogs fired together), that one stands: return it, and this
     * rank adopts it instead of logging its own.
     *
     * @param diagnosis this rank's diagnosis
     * @return the diagnosis that stands
     */
    default Diagnosis diagnosed(Diagnosis diagnosis) {
        return diagnosis;
    }

    /**
     * The diagnosis of the failure that aborts this rank, made by a peer (or this rank) and known to
     * the launcher, or null: attached to this rank's abort, whose reason it then leads.
     *
     * @return the diagnosis, or null
     */
    default Diagnosis diagnosis() {
        return null;
    }
}
