package dev.jnccl.it;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.jnccl.testsupport.ChildJvm;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import dev.jnccl.threads.ThreadsPack;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The rank threads of a pack never keep the JVM alive: a program whose main method launches a pack
 * and returns (its ranks still waiting in their work) ends, instead of hanging until someone joins
 * or closes the pack.
 */
class ThreadsJvmExitTest {

    @Test
    void aLaunchedPackDoesNotKeepTheJvmAlive() throws Exception {
        long start = System.nanoTime();
        ChildJvm.Result result = ChildJvm.run(List.of("--enable-native-access=ALL-UNNAMED", "-Djnccl.backend=auto"),
                Map.of(), Abandoning.class);
        long seconds = TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - start);
        assertEquals(0, result.exitCode(), result.output());
        assertTrue(result.output().contains("LAUNCHED"), result.output());
        assertTrue(seconds < 30, "the child JVM took " + seconds + " s to end\n" + result.output());
    }

    /** The child: launches a rank that waits on a latch nobody counts down, prints, returns from main. */
    public static final class Abandoning {
        private Abandoning() {}

        /**
         * Launches the pack and returns.
         *
         * @param args unused
         */
        public static void main(String[] args) {
            CountDownLatch never = new CountDownLatch(1);
            ThreadsPack pack = ThreadsCommunicators.launch(1, ThreadsOptions.defaults(), comm -> {
                try {
                    never.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            System.out.println("LAUNCHED " + pack.size());
            System.out.flush();
        }
    }
}
