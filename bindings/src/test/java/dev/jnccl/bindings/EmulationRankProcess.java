package dev.jnccl.bindings;

import dev.jnccl.bindings.EmulationCollectives.Case;
import dev.jnccl.bindings.EmulationCollectives.Coll;
import dev.jnccl.bindings.EmulationSupport.DType;
import dev.jnccl.bindings.EmulationSupport.Op;
import dev.jnccl.bindings.cuda.CudaRuntime;
import dev.jnccl.bindings.nccl.Nccl;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/**
 * One rank of a multi-process world (main class of a child JVM started by
 * {@link EmulationProcessWorldTest}). Arguments: unique id (hex), world size, rank, seed. The ranks
 * meet only through the unique id; each checks its own results against the Java reference, which it
 * recomputes from the seed. Exit code 0 = every result right, 1 = wrong results, 2 = an error. An
 * optional fifth argument makes the rank leave right after joining: "die-after-init" (exits at once)
 * or "wait-after-init" (waits to be killed).
 */
public final class EmulationRankProcess {
    private EmulationRankProcess() {}

    /** The cases every rank runs, in this order (the same list in every process). */
    static List<Case> cases(int n, long seed) {
        return List.of(
                new Case(Coll.ALL_REDUCE, DType.FLOAT32, Op.SUM, 300_001, false, 0, seed),
                new Case(Coll.ALL_GATHER, DType.INT64, null, 1001, false, 0, seed + 1),
                new Case(Coll.REDUCE_SCATTER, DType.BFLOAT16, Op.AVG, 4097, true, 0, seed + 2),
                new Case(Coll.ALL_REDUCE, DType.FP8E4M3, Op.MAX, 777, true, 0, seed + 3),
                new Case(Coll.BROADCAST, DType.UINT8, null, 1_500_001, false, n - 1, seed + 4),
                new Case(Coll.ALL_TO_ALL, DType.INT32, null, 301, false, 0, seed + 5),
                new Case(Coll.SEND_RECV, DType.FLOAT64, null, 999, false, 0, seed + 6));
    }

    public static void main(String[] args) {
        try {
            String idHex = args[0];
            int n = Integer.parseInt(args[1]);
            int rank = Integer.parseInt(args[2]);
            long seed = Long.parseLong(args[3]);
            LoadedLibraries libraries = NativeLibraries.load();
            if (libraries.backend() != BackendSetting.HOST) {
                System.out.println("rank " + rank + ": backend is " + libraries.backend().id() + ", not host");
                System.exit(2);
            }
            List<String> problems = new ArrayList<>();
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment id = EmulationSupport.uniqueIdFromHex(idHex, arena);
                MemorySegment comm = EmulationSupport.initRank(id, n, rank, rank);
                if (args.length > 4 && args[4].equals("die-after-init")) {
                    // A rank process that dies without a word: its peers must notice (ncclRemoteError).
                    System.out.println("rank " + rank + " joined, now dying");
                    System.out.flush();
                    Runtime.getRuntime().halt(0);
                }
                if (args.length > 4 && args[4].equals("wait-after-init")) {
                    // A rank process that the test SIGKILLs while its peers wait for it (EmulationElasticTest).
                    System.out.println("rank " + rank + " joined, now waiting to be killed");
                    System.out.flush();
                    Thread.sleep(120_000);
                    Runtime.getRuntime().halt(3);
                }
                if (EmulationSupport.commInt(comm, "count") != n || EmulationSupport.commInt(comm, "rank") != rank) {
                    problems.add("rank " + rank + ": ncclCommCount / ncclCommUserRank disagree");
                }
                MemorySegment stream = EmulationSupport.newStream();
                for (Case c : cases(n, seed)) {
                    try (Arena caseArena = Arena.ofConfined()) {
                        EmulationCollectives.Prepared p = EmulationCollectives.prepare(c, n, caseArena);
                        problems.addAll(EmulationCollectives.execute(p, rank, comm, stream));
                    }
                }
                EmulationSupport.nccl(Nccl.ncclCommFinalize(comm), "ncclCommFinalize");
                EmulationSupport.nccl(Nccl.ncclCommDestroy(comm), "ncclCommDestroy");
                EmulationSupport.cuda(CudaRuntime.cudaStreamDestroy(stream), "cudaStreamDestroy");
            }
            problems.forEach(System.out::println);
            System.out.println("rank " + rank + " of " + n + " (pid " + ProcessHandle.current().pid() + "): "
                    + (problems.isEmpty() ? "all results right" : problems.size() + " problems"));
            System.out.flush();
            System.exit(problems.isEmpty() ? 0 : 1);
        } catch (Throwable t) {
            t.printStackTrace(System.out);
            System.out.flush();
            System.exit(2);
        }
    }
}
