package dev.jnccl.examples.bench;

import dev.jnccl.Communicator;
import dev.jnccl.CommunicatorMode;
import dev.jnccl.CommunicatorOptions;
import dev.jnccl.mpi.MpiCommunicators;
import dev.jnccl.mpi.MpiOptions;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import java.util.function.Consumer;

/**
 * How the benchmark gets its ranks' communicators: every rank runs {@code work} with its own. In
 * threads mode all ranks are threads of this JVM (and rank 0 prints); under MPI each process is one
 * rank (and the process of rank 0 prints).
 */
interface BenchLauncher {

    /**
     * Runs {@code work} on every rank of this process, {@code ranks} ranks per process, over
     * {@code transport}, on communicators of {@code mode}.
     */
    void run(int ranks, String transport, CommunicatorMode mode, Consumer<Communicator> work);

    /** The launcher {@code --launcher name} selects. */
    static BenchLauncher named(String name) {
        return switch (name) {
            case "threads" -> new Threads();
            case "mpi" -> new Mpi();
            default -> throw new BenchOptions.UsageException("--launcher '" + name + "': expected threads or mpi");
        };
    }

    /** One JVM thread per rank ({@link ThreadsCommunicators}); memcpy selects threads mode's copy paths. */
    final class Threads implements BenchLauncher {
        @Override
        public void run(int ranks, String transport, CommunicatorMode mode, Consumer<Communicator> work) {
            boolean memcpy = transport.equals("memcpy");
            ThreadsOptions options = ThreadsOptions.defaults().withMemcpyAllGather(memcpy).withMemcpySendRecv(memcpy)
                    .withCommunicator(CommunicatorOptions.defaults().withMode(mode));
            ThreadsCommunicators.run(ranks, options, work);
        }
    }

    /**
     * One process per rank under mpirun ({@link MpiCommunicators}): {@code -g} is per process and
     * must be 1; the process's communicator runs {@code work} and is closed; a failure ends the job
     * ({@link MpiCommunicators#run}). Rank 0 prints; times and #wrong are gathered over ranks.
     */
    final class Mpi implements BenchLauncher {
        @Override
        public void run(int ranks, String transport, CommunicatorMode mode, Consumer<Communicator> work) {
            if (ranks != 1) {
                throw new BenchOptions.UsageException("--launcher mpi: -g " + ranks + ": each MPI process drives one"
                        + " GPU (-g 1); the number of ranks is mpirun's -np");
            }
            if (transport.equals("memcpy")) {
                throw new BenchOptions.UsageException("--launcher mpi: --transport memcpy is a threads-mode transport");
            }
            MpiCommunicators.run(MpiOptions.defaults().withCommunicator(CommunicatorOptions.defaults().withMode(mode)), work);
        }
    }
}
