package dev.jnccl.examples.bench;

import dev.jnccl.Communicator;
import dev.jnccl.threads.ThreadsCommunicators;
import dev.jnccl.threads.ThreadsOptions;
import java.util.function.Consumer;

/**
 * How the benchmark gets its ranks' communicators: every rank runs {@code work} with its own. In
 * threads mode all ranks are threads of this JVM (and rank 0 prints); under MPI each process is one
 * rank (and the process of rank 0 prints).
 */
interface BenchLauncher {

    /** Runs {@code work} on every rank of this process, {@code ranks} ranks per process, over {@code transport}. */
    void run(int ranks, String transport, Consumer<Communicator> work);

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
        public void run(int ranks, String transport, Consumer<Communicator> work) {
            boolean memcpy = transport.equals("memcpy");
            ThreadsOptions options = ThreadsOptions.defaults().withMemcpyAllGather(memcpy).withMemcpySendRecv(memcpy);
            ThreadsCommunicators.run(ranks, options, work);
        }
    }

    /**
     * One process per rank under mpirun. Wired once the MPI mode (module {@code jnccl-mpi},
     * {@code dev.jnccl.mpi.MpiCommunicators.create()}) exists: then {@code run} checks
     * {@code ranks == 1} ({@code -g} is per process), creates the process's communicator with
     * {@code MpiCommunicators.create()}, runs {@code work} on it and closes it. Everything else
     * (rank 0 prints, times and #wrong gathered over ranks) already works per communicator.
     */
    final class Mpi implements BenchLauncher {
        @Override
        public void run(int ranks, String transport, Consumer<Communicator> work) {
            throw new BenchOptions.UsageException("--launcher mpi: jnccl's MPI mode (dev.jnccl.mpi.MpiCommunicators) is "
                    + "not available in this build yet; use --launcher threads");
        }
    }
}
