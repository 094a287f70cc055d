package dev.jnccl.examples;

import dev.jnccl.Backend;
import dev.jnccl.Communicator;
import dev.jnccl.DType;
import dev.jnccl.JncclRuntime;
import dev.jnccl.RankLostException;
import dev.jnccl.ReduceOp;
import dev.jnccl.cuda.Cuda;
import dev.jnccl.cuda.DeviceMemory;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import dev.jnccl.threads.ThreadsPack;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentSkipListMap;

/**
 * Training that survives a lost rank: W ranks (threads mode) fit a linear regression by data-parallel
 * gradient descent on seeded synthetic data, the gradients summed over the ranks by an all-reduce.
 * The last rank throws at step {@link #LOST_AT}. The survivors get {@link RankLostException} from
 * the all-reduce they are in, {@linkplain RankLostException#recover() recover} (the pack goes on
 * without the lost rank: {@link ThreadsOptions#withContinueWithoutFailedRanks}), reload the model
 * state from their new rank 0 (a broadcast), re-shard the batch over the smaller world and go on.
 * {@link #main} prints the world of each step and the final loss, and checks the final weights
 * against {@link #reference}, the same training in plain Java at the same sequence of world sizes.
 *
 * <p>With {@code --replace} the pack has a spare device ({@link ThreadsOptions#withReplacementDevices}):
 * the survivors' {@code recover()} grows their communicator back to 4 ranks with a replacement rank
 * that the pack starts on the spare device, running the same loop; it knows it is one
 * ({@link ThreadsCommunicators#isReplacement()}) and first takes part in the survivors' reload, so it
 * starts from their model and step. Every step then runs at 4 ranks, the replacement's share of the
 * batch the lost rank's.
 * Run: {@code scripts/run-elastic-example.sh [--replace]} (4 ranks on the host emulation without a GPU).
 */
public final class ElasticTraining {
    /** Features of the model (its weights), the last one a constant 1 (the bias). */
    static final int FEATURES = 8;
    /** Samples of the data set. */
    static final int SAMPLES = 4096;
    /** Samples each rank takes per step: a step's batch is {@code world * PER_RANK} samples. */
    static final int PER_RANK = 64;
    static final int STEPS = 12;
    /** The step at which the last rank throws. */
    static final int LOST_AT = 5;
    static final double LEARNING_RATE = 0.05;
    private static final long SEED = 20261205L;
    /** The state rank 0 hands the others after a loss: the next step, the weights, each step's world. */
    private static final int STATE = 1 + FEATURES + STEPS;

    private ElasticTraining() {}

    /**
     * What the training ended with on one rank.
     *
     * @param weights the model's weights after the last step
     * @param losses  the batch's mean squared error at each step (before that step's update)
     * @param worlds  the world size each step ran at
     */
    record Result(double[] weights, double[] losses, int[] worlds) {}

    /**
     * Runs the example: 4 ranks on the host emulation, else one per visible GPU (at least 3).
     *
     * @param args ignored
     */
    public static void main(String[] args) {
        boolean replace = Arrays.asList(args).contains("--replace");
        int gpus = JncclRuntime.query().backend() == Backend.HOST ? 4 : 0;
        int needed = replace ? 4 : 3; // a replacement needs a spare device besides the ranks'
        if (gpus == 0 && Cuda.deviceCount() < needed) {
            // One rank is lost and the pack goes on with at least 2 (withContinueWithoutFailedRanks(2)).
            System.err.println("ElasticTraining" + (replace ? " --replace" : "") + " needs " + needed + " or more GPUs ("
                    + Cuda.deviceCount() + " visible), or the host emulation (-Djnccl.backend=host)");
            System.exit(2);
        }
        List<Result> survivors = train(gpus, replace);
        Result first = survivors.getFirst();
        double error = maxDifference(first.weights(), reference(first.worlds()).weights());
        boolean ok = error <= TOLERANCE && survivors.stream().allMatch(r -> Arrays.equals(r.weights(), first.weights()));
        System.out.println((ok ? "OK" : "WRONG") + ": worlds per step " + Arrays.toString(first.worlds())
                + ", final loss " + first.losses()[STEPS - 1] + ", largest difference from the reference " + error);
        System.exit(ok ? 0 : 1);
    }

    /**
     * How far the distributed weights may be from the reference: both sum the same doubles, only the
     * all-reduce adds the ranks' partial sums in another order, which changes a sum by a few units
     * in the last place (about 1e-16 relative) per step; gradient descent with this learning rate
     * does not amplify it over 12 steps. 1e-9 leaves a wide margin, while a step at a wrong world size,
     * a sample taken twice or an update lost moves the weights by more than 1e-4.
     */
    static final double TOLERANCE = 1e-9;

    /**
     * Trains on {@code gpus} ranks (0: every visible GPU); the last rank is lost at {@link #LOST_AT}.
     *
     * @return each survivor's result, in the order of their ranks at the end
     */
    static List<Result> train(int gpus) {
        return train(gpus, false);
    }

    /**
     * As {@link #train(int)}; with {@code replace}, the lost rank is replaced on a spare device (the
     * device after the ranks': 4 with {@code gpus} 4; with 0, the last visible one, the ranks on the others).
     *
     * @return each survivor's result, in the order of their first ranks, then the replacement's
     */
    static List<Result> train(int gpus, boolean replace) {
        int ranks = gpus == 0 && replace ? Cuda.deviceCount() - 1 : gpus;
        ThreadsOptions options = ThreadsOptions.defaults().withContinueWithoutFailedRanks(2);
        if (replace) {
            options = options.withReplacementDevices(ranks);
        }
        Map<Integer, Result> results = new ConcurrentSkipListMap<>(); // by the ranks' first ranks, replacements last
        try (ThreadsPack pack = ThreadsCommunicators.launch(ranks, options, comm -> {
            boolean replacement = ThreadsCommunicators.isReplacement();
            int first = replacement ? REPLACEMENT_KEYS + comm.rank() : comm.rank();
            results.put(first, rank(comm, !replacement && first == comm.worldSize() - 1, replacement));
        })) {
            pack.join(); // returns once every survivor's (and replacement's) work has returned
            System.out.println("lost ranks: " + pack.lostRanks().keySet() + ", replacements on devices "
                    + pack.replacementDevices());
        }
        return List.copyOf(results.values());
    }

    /** Where replacements' results go in the map of {@link #train}: after every original rank's. */
    private static final int REPLACEMENT_KEYS = 1 << 20;

    /**
     * One rank's training loop; {@code doomed}: this rank throws at {@link #LOST_AT};
     * {@code replacement}: this rank replaces a lost one and first reloads the survivors' state.
     */
    private static Result rank(Communicator first, boolean doomed, boolean replacement) {
        Communicator comm = first;
        double[] state = new double[STATE]; // [next step, weights..., world of each step]
        double[] losses = new double[STEPS];
        // Device buffers live for one step or one reload: a rank that dies must not free device memory
        // on its way out while a peer on the same GPU waits for it in a collective (cudaFree waits for
        // the whole device), which matters where ranks share a GPU.
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment host = arena.allocate(ValueLayout.JAVA_DOUBLE, STATE);
            if (replacement) {
                reload(comm, host, state); // the broadcast the survivors make after their recover()
                Arrays.fill(losses, Double.NaN); // the steps before it joined were not its own
            }
            while (state[0] < STEPS) {
                int step = (int) state[0];
                if (doomed && step == LOST_AT) {
                    throw new IllegalStateException("rank " + comm.rank() + " is lost at step " + step + " (on purpose)");
                }
                try {
                    losses[step] = step(comm, host, state, step);
                } catch (RankLostException e) {
                    // The survivors' communicator: ranks renumbered, the lost ones gone (with a spare
                    // device, grown back by a replacement rank, last).
                    comm = e.recover();
                    reload(comm, host, state);
                }
            }
        }
        return new Result(Arrays.copyOfRange(state, 1, 1 + FEATURES), losses, worlds(state));
    }

    /**
     * One step: this rank's share of the batch gives partial sums of the gradient and of the squared
     * error; the all-reduce adds them over the ranks; every rank applies the same update.
     */
    private static double step(Communicator comm, MemorySegment host, double[] state, int step) {
        int world = comm.worldSize();
        double[] partial = partialSums(weights(state), step, comm.rank(), world);
        MemorySegment sums = host.asSlice(0, 8L * partial.length);
        MemorySegment.copy(partial, 0, sums, ValueLayout.JAVA_DOUBLE, 0, partial.length);
        try (DeviceMemory device = DeviceMemory.allocate(DType.FP64, partial.length)) {
            device.copyFromHost(sums);
            comm.allReduce(device.tensor(DType.FP64), ReduceOp.SUM, comm.stream());
            comm.synchronize();
            device.copyToHost(sums);
        }
        return update(state, sums.toArray(ValueLayout.JAVA_DOUBLE), step, world);
    }

    /**
     * After a loss: the survivors' rank 0 hands everyone its state (its next step, its weights, the
     * worlds of the steps it did), so that all go on from the same model and step, with the batch
     * re-sharded over the new world; a replacement rank takes part from its start.
     */
    private static void reload(Communicator comm, MemorySegment host, double[] state) {
        MemorySegment.copy(state, 0, host, ValueLayout.JAVA_DOUBLE, 0, STATE);
        try (DeviceMemory device = DeviceMemory.allocate(DType.FP64, STATE)) {
            device.copyFromHost(host);
            comm.broadcast(device.tensor(DType.FP64), 0, comm.stream());
            comm.synchronize();
            device.copyToHost(host);
        }
        MemorySegment.copy(host, ValueLayout.JAVA_DOUBLE, 0, state, 0, STATE);
    }

    /**
     * The same training in plain Java: step s at world {@code worlds[s]}, the ranks' partial sums
     * added in rank order.
     *
     * @param worlds the world size of each step
     * @return the weights and losses the ranks should end with
     */
    static Result reference(int[] worlds) {
        double[] state = new double[STATE];
        double[] losses = new double[STEPS];
        for (int step = 0; step < STEPS; step++) {
            double[] total = new double[FEATURES + 1];
            for (int rank = 0; rank < worlds[step]; rank++) {
                double[] partial = partialSums(weights(state), step, rank, worlds[step]);
                for (int i = 0; i < total.length; i++) {
                    total[i] += partial[i];
                }
            }
            losses[step] = update(state, total, step, worlds[step]);
        }
        return new Result(weights(state), losses, worlds);
    }

    /** Applies the step's summed gradient to the weights in {@code state}, records the world; returns the loss. */
    private static double update(double[] state, double[] total, int step, int world) {
        double batch = (double) world * PER_RANK;
        for (int f = 0; f < FEATURES; f++) {
            state[1 + f] -= LEARNING_RATE * 2 * total[f] / batch;
        }
        state[1 + FEATURES + step] = world;
        state[0] = step + 1;
        return total[FEATURES] / batch;
    }

    /**
     * Rank {@code rank}'s share of step {@code step}'s batch at world {@code world}: the sums over its
     * samples of (prediction - target) * x (the gradient, up to 2 / batch) and of the squared error.
     * The batch is {@code world * PER_RANK} consecutive samples (wrapping) from an offset of the step.
     */
    static double[] partialSums(double[] weights, int step, int rank, int world) {
        double[] sums = new double[FEATURES + 1];
        int start = step * 389 + rank * PER_RANK;
        for (int j = 0; j < PER_RANK; j++) {
            double[] x = features(Math.floorMod(start + j, SAMPLES));
            double error = dot(weights, x) - target(x);
            for (int f = 0; f < FEATURES; f++) {
                sums[f] += error * x[f];
            }
            sums[FEATURES] += error * error;
        }
        return sums;
    }

    /** Sample {@code index}'s features: seeded, in [-1, 1), the last one the constant 1. */
    static double[] features(int index) {
        SplittableRandom random = new SplittableRandom(SEED + index);
        double[] x = new double[FEATURES];
        for (int f = 0; f < FEATURES - 1; f++) {
            x[f] = random.nextDouble(-1, 1);
        }
        x[FEATURES - 1] = 1;
        return x;
    }

    /** The target the model should learn: a fixed linear function of the features plus a little seeded noise. */
    private static double target(double[] x) {
        double y = 0;
        for (int f = 0; f < FEATURES; f++) {
            y += (f + 1) * 0.5 * x[f] * (f % 2 == 0 ? 1 : -1);
        }
        return y + 0.01 * Math.sin(1000 * x[0]);
    }

    private static double dot(double[] a, double[] b) {
        double sum = 0;
        for (int i = 0; i < a.length; i++) {
            sum += a[i] * b[i];
        }
        return sum;
    }

    private static double[] weights(double[] state) {
        return Arrays.copyOfRange(state, 1, 1 + FEATURES);
    }

    private static int[] worlds(double[] state) {
        int[] worlds = new int[STEPS];
        for (int s = 0; s < STEPS; s++) {
            worlds[s] = (int) state[1 + FEATURES + s];
        }
        return worlds;
    }

    /** The largest difference between two weight vectors, element by element. */
    static double maxDifference(double[] a, double[] b) {
        double max = 0;
        for (int i = 0; i < a.length; i++) {
            max = Math.max(max, Math.abs(a[i] - b[i]));
        }
        return max;
    }
}
