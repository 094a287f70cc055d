package dev.jnccl.examples;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The elastic training example on the host emulation: rank 3 of 4 is lost at its step, the three
 * survivors finish, agree bit for bit, and match the plain-Java reference run at the same sequence of
 * world sizes element by element (and not the run that never lost a rank).
 */
@Timeout(120)
class ElasticTrainingTest {

    @Test
    void theSurvivorsFinishTheTrainingAsTheReferenceAtTheSameWorldSizes() {
        List<ElasticTraining.Result> survivors = ElasticTraining.train(4);
        assertEquals(3, survivors.size(), "ranks 0, 1 and 2 survive");
        ElasticTraining.Result first = survivors.getFirst();
        int[] expectedWorlds = new int[ElasticTraining.STEPS];
        Arrays.fill(expectedWorlds, 0, ElasticTraining.LOST_AT, 4);
        Arrays.fill(expectedWorlds, ElasticTraining.LOST_AT, ElasticTraining.STEPS, 3);
        assertArrayEquals(expectedWorlds, first.worlds(), "4 ranks before the loss, 3 from its step on");
        for (ElasticTraining.Result other : survivors) {
            assertArrayEquals(first.weights(), other.weights(), "every survivor ends with rank 0's model");
            assertArrayEquals(first.worlds(), other.worlds());
        }
        ElasticTraining.Result reference = ElasticTraining.reference(first.worlds());
        for (int f = 0; f < ElasticTraining.FEATURES; f++) {
            assertEquals(reference.weights()[f], first.weights()[f], ElasticTraining.TOLERANCE, "weight " + f);
        }
        for (int step = 0; step < ElasticTraining.STEPS; step++) {
            assertEquals(reference.losses()[step], first.losses()[step], ElasticTraining.TOLERANCE, "loss at step " + step);
        }
        assertTrue(first.losses()[ElasticTraining.STEPS - 1] < first.losses()[0] / 2, "the model learns: losses "
                + Arrays.toString(first.losses()));
        // The check can fail: the run that never lost a rank ends elsewhere, far beyond the tolerance.
        int[] neverLost = new int[ElasticTraining.STEPS];
        Arrays.fill(neverLost, 4);
        double apart = ElasticTraining.maxDifference(ElasticTraining.reference(neverLost).weights(), first.weights());
        assertTrue(apart > 1e-4, "a run at 4 ranks throughout differs by only " + apart);
    }

    @Test
    void samplesDifferAndCarryTheBias() {
        double[] a = ElasticTraining.features(0);
        double[] b = ElasticTraining.features(1);
        assertTrue(!Arrays.equals(a, b));
        assertEquals(1.0, a[ElasticTraining.FEATURES - 1]);
    }
}
