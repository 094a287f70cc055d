package dev.jnccl.mpi;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** The probe for lost ranks counts a peer's silence in the exchange before, never a silence shorter than its bound. */
class SilencesTest {
    private static final long BOUND = TimeUnit.SECONDS.toNanos(3);
    private static final long MS = TimeUnit.MILLISECONDS.toNanos(1);

    @Test
    void withoutAnEarlierSilenceTheProbeWaitsItsWholeBound() {
        Silences silences = new Silences(3);
        assertEquals(BOUND, silences.probeNanos(BOUND, System.nanoTime()), "no exchange yet");
        silences.exchanged(System.nanoTime(), new boolean[] {true, true, true}, new boolean[3]);
        assertEquals(BOUND, silences.probeNanos(BOUND, System.nanoTime()), "everyone answered");
    }

    @Test
    void aPeerSilentInTheDiagnosisIsAskedAgainForTheRestOfTheBoundOnly() {
        Silences silences = new Silences(3);
        long posted = System.nanoTime() - 2_000 * MS; // the diagnosis asked 2 s ago; rank 2 never answered
        silences.exchanged(posted, new boolean[] {true, true, false}, new boolean[3]);
        long wait = silences.probeNanos(BOUND, System.nanoTime());
        assertTrue(wait <= 1_000 * MS && wait >= Silences.MIN_PROBE_NANOS, "waits " + wait / MS + " ms");
        long probePosted = System.nanoTime();
        // The probe: rank 2 silent again, rank 1 silent for the first time (it answered the diagnosis).
        silences.exchanged(probePosted, new boolean[] {true, false, false}, new boolean[3]);
        long end = probePosted + wait;
        assertTrue(silences.goneAfter(2, BOUND, end), "silent 3 s in all");
        assertFalse(silences.goneAfter(1, BOUND, end), "silent only for the shortened probe: not gone");
        assertFalse(silences.goneAfter(0, BOUND, end));
    }

    @Test
    void aSilenceOlderThanTheBoundIsNotCountedAndARefusedPeerIsGone() {
        Silences silences = new Silences(2);
        silences.exchanged(System.nanoTime() - 10_000 * MS, new boolean[] {true, false}, new boolean[] {false, false});
        assertEquals(BOUND, silences.probeNanos(BOUND, System.nanoTime() + 5_000 * MS), "the last exchange is too old");
        silences.exchanged(System.nanoTime(), new boolean[] {true, false}, new boolean[] {false, true});
        assertTrue(silences.goneAfter(1, BOUND, System.nanoTime()), "MPI refused the request: gone at once");
    }
}
