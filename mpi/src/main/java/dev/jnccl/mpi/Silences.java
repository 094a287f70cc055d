package dev.jnccl.mpi;

import java.util.concurrent.TimeUnit;

/**
 * How long each peer has left a request for its summary unanswered, over the exchanges of one
 * communicator (guarded by {@link MpiDiagnoses}' lock). The probe for lost ranks usually follows an
 * exchange of the abort's diagnosis in which a dead peer was already silent (a process killed
 * during NCCL's wait, or between steps, gives no summary to either): the probe counts that silence,
 * so that the dead peer is not waited for twice, while a peer is still found gone only after the
 * probe's whole bound of silence. A peer that answered the last exchange gets the probe's wait only,
 * and is not found gone when that was shortened.
 */
final class Silences {
    /** The shortest wait of a probe: every peer is asked again, and a live one answers from its own thread. */
    static final long MIN_PROBE_NANOS = TimeUnit.MILLISECONDS.toNanos(500);

    /** Per peer: whether it left the request of the last exchange unanswered. */
    private final boolean[] silent;
    /** Per silent peer: when the first request it has left unanswered since was posted. */
    private final long[] since;
    /** Per peer: whether MPI refused the last exchange's request to it. */
    private final boolean[] gone;
    /** When the last exchange ended, and whether there was one. */
    private long lastEnd;
    private boolean exchanged;

    Silences(int size) {
        silent = new boolean[size];
        since = new long[size];
        gone = new boolean[size];
    }

    /**
     * How long a probe that finds peers gone after {@code boundNanos} of silence waits for answers:
     * the bound, less the silence the peers silent at a recent exchange (one that ended within the
     * bound) have shown already; at least {@link #MIN_PROBE_NANOS}.
     */
    long probeNanos(long boundNanos, long now) {
        if (!exchanged || now - lastEnd > boundNanos) {
            return boundNanos;
        }
        long shortest = -1;
        for (int peer = 0; peer < silent.length; peer++) {
            if (silent[peer]) {
                shortest = shortest < 0 ? now - since[peer] : Math.min(shortest, now - since[peer]);
            }
        }
        return shortest < 0 ? boundNanos : Math.max(boundNanos - shortest, MIN_PROBE_NANOS);
    }

    /**
     * An exchange whose requests were posted at {@code posted} ended now: {@code answered[p]}, peer p
     * answered; {@code refused[p]}, MPI refused the request to it (MPI knows its process is gone).
     */
    void exchanged(long posted, boolean[] answered, boolean[] refused) {
        for (int peer = 0; peer < silent.length; peer++) {
            if (answered[peer]) {
                silent[peer] = false;
            } else if (!silent[peer]) {
                silent[peer] = true;
                since[peer] = posted;
            }
            gone[peer] = refused[peer];
        }
        lastEnd = System.nanoTime();
        exchanged = true;
    }

    /** Whether {@code peer} is gone: MPI refused to reach it, or it left every request unanswered for {@code boundNanos}. */
    boolean goneAfter(int peer, long boundNanos, long now) {
        return gone[peer] || (silent[peer] && now - since[peer] >= boundNanos);
    }
}
