package dev.jnccl.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.spark.BarrierTaskContext;
import org.apache.spark.api.java.JavaSparkContext;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Spark's own GPU scheduling on the standalone cluster ({@link LocalCluster}): each Worker offers one
 * "gpu", address 0, from a discovery script (both Workers are on this machine, so it is one device),
 * each executor takes it, and {@code spark.task.resource.gpu.amount=0.5} puts two tasks on it: four
 * ranks on device 0 over two executor processes. NCCL refuses that unless 2.30+ with
 * {@code NCCL_MULTI_RANK_GPU_ENABLE=1}; the emulation follows the same variable, which the executors
 * get here, so the stage runs: an all-reduce and a host gather, checked element by element (every
 * operation across executors is {@link SparkClusterTest}'s).
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class SparkClusterGpuResourcesTest {
    private static LocalCluster cluster;
    private static JavaSparkContext spark;

    @BeforeAll
    static void startCluster() throws Exception {
        Path script = LocalCluster.sparkHome().resolve("gpu-discovery.sh");
        Files.createDirectories(script.getParent());
        Files.writeString(script, "#!/bin/sh\necho '{\"name\": \"gpu\", \"addresses\": [\"0\"]}'\n");
        Files.setPosixFilePermissions(script, PosixFilePermissions.fromString("rwxr-xr-x"));
        cluster = LocalCluster.start("jnccl-spark-gpu-resources-test", "spark.worker.resource.gpu.amount=1",
                "spark.worker.resource.gpu.discoveryScript=" + script, "spark.executor.resource.gpu.amount=1",
                "spark.task.resource.gpu.amount=0.5", "spark.executorEnv.NCCL_MULTI_RANK_GPU_ENABLE=1");
        spark = cluster.spark();
    }

    @AfterAll
    static void stopCluster() throws Exception {
        if (cluster != null) {
            cluster.stop();
        }
    }

    @Test
    void fractionalGpuAmountsPutTwoTasksOnOneDeviceWhereNcclAllowsIt() {
        long seed = System.nanoTime();
        // withDevice(5) loses: the GPU that Spark assigned to the task is what the cluster reserved for it.
        List<String> results = SparkCommunicators.run(spark, 4, SparkOptions.defaults().withDevice(5), comm -> {
            new SparkCommunicatorsTest.RankChecks(comm, seed).allReduceAndHostGather();
            return ProcessHandle.current().pid() + " " + comm.device() + " "
                    + Arrays.toString(BarrierTaskContext.get().resources().get("gpu").get().addresses());
        });
        assertEquals(Set.of("0 [0]"), Set.copyOf(results.stream().map(r -> r.substring(r.indexOf(' ') + 1)).toList()),
                "every rank on Spark's gpu 0 (seed " + seed + "): " + results);
        assertEquals(2, results.stream().map(r -> r.substring(0, r.indexOf(' '))).distinct().count(),
                "two executor processes: " + results);
    }
}
