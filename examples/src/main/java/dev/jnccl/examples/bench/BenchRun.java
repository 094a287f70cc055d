package dev.jnccl.examples.bench;

import java.util.ArrayList;
import java.util.List;

/**
 * What one run of the benchmark (one operation over one transport) measured, as nccl-tests reports
 * it: the devices, one row per size (and type and reduction), the failed checks and the average bus
 * bandwidth. Filled by rank 0 while the run goes.
 */
final class BenchRun {

    /**
     * One placement's figures.
     *
     * @param timeUs time per operation in microseconds (ranks' CUDA-event times combined by {@code -a})
     * @param algBw  algorithm bandwidth, GB/s (size / time)
     * @param busBw  bus bandwidth, GB/s (algbw * the operation's factor)
     * @param wrong  wrong elements summed over ranks, or -1 when not checked ({@code N/A})
     */
    record Measurement(double timeUs, double algBw, double busBw, long wrong) {
        boolean checked() {
            return wrong >= 0;
        }
    }

    /**
     * One row of the table; {@code outOfPlace} is null when jnccl has no out-of-place form of the
     * operation (nccl-tests then prints blanks).
     */
    record Row(long size, long count, String type, String redop, int root, Measurement outOfPlace,
               Measurement inPlace) {}

    /** A rank's line of "# Using devices". */
    record Device(int rank, int pid, String host, int device, String info) {}

    final String op;
    final String transport;
    final String launcher;
    final String mode;
    final int ranks;
    final String backend;
    final String ncclVersion;
    final List<Device> devices;
    final List<Row> rows = new ArrayList<>();
    final String startTime;
    String endTime;

    BenchRun(String op, String transport, String launcher, String mode, int ranks, String backend, String ncclVersion,
             List<Device> devices, String startTime) {
        this.op = op;
        this.transport = transport;
        this.launcher = launcher;
        this.mode = mode;
        this.ranks = ranks;
        this.backend = backend;
        this.ncclVersion = ncclVersion;
        this.devices = List.copyOf(devices);
        this.startTime = startTime;
    }

    /** nccl-tests' "Out of bounds values": the placements whose check found a wrong element. */
    int errors() {
        int errors = 0;
        for (Row row : rows) {
            for (Measurement m : new Measurement[] {row.outOfPlace(), row.inPlace()}) {
                if (m != null && m.wrong() > 0) {
                    errors++;
                }
            }
        }
        return errors;
    }

    /** nccl-tests' "Avg bus bandwidth": the mean busbw over every measured placement of every row. */
    double averageBusBw() {
        double sum = 0;
        int count = 0;
        for (Row row : rows) {
            for (Measurement m : new Measurement[] {row.outOfPlace(), row.inPlace()}) {
                if (m != null) {
                    sum += m.busBw();
                    count++;
                }
            }
        }
        return count == 0 ? 0 : sum / count;
    }

    /** nccl-tests' NCCL version code (2.28.3: 22803), or 0 when the version does not parse. */
    int ncclVersionCode() {
        String[] parts = ncclVersion.split("\\.");
        try {
            return Integer.parseInt(parts[0]) * 10000 + Integer.parseInt(parts[1]) * 100
                    + Integer.parseInt(parts[2].replaceAll("\\D.*", ""));
        } catch (RuntimeException e) {
            return 0;
        }
    }

    /** The program name of the header and footer lines, e.g. {@code jnccl_all_reduce_perf}. */
    String programName() {
        return "jnccl_" + op + "_perf";
    }

    boolean isEmulation() {
        return backend.equals("host");
    }
}
