package dev.jnccl.examples.bench;

import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

/**
 * The {@code --json} file: nccl-tests' {@code -J} layout (version 3: {@code config} with
 * {@code devices}, {@code results} with {@code out_of_place}/{@code in_place} objects,
 * {@code out_of_bounds}, {@code average_bus_bandwidth}, {@code errors}), number formats and quirks
 * included (booleans as strings, {@code root} as a padded string), plus a {@code jnccl} object
 * (operation, launcher, transport, local_register, backend). Only NCCL_*, JNCCL_*, CUDA_* and OMPI_COMM_WORLD_*
 * variables go to {@code env} (nccl-tests writes the whole environment). Several runs: an array.
 */
final class JsonReport {
    private JsonReport() {}

    static String write(List<BenchRun> runs, BenchOptions options) {
        StringBuilder json = new StringBuilder();
        if (runs.size() == 1) {
            run(json, runs.get(0), options);
        } else {
            json.append('[');
            for (int i = 0; i < runs.size(); i++) {
                if (i > 0) {
                    json.append(",\n");
                }
                run(json, runs.get(i), options);
            }
            json.append(']');
        }
        return json.append('\n').toString();
    }

    private static void run(StringBuilder j, BenchRun run, BenchOptions options) {
        j.append('{');
        key(j, "version", false).append(3);
        key(j, "start_time", true).append(str(run.startTime));
        key(j, "args", true).append('[');
        List<String> args = new java.util.ArrayList<>();
        args.add(run.programName());
        args.addAll(options.args());
        for (int i = 0; i < args.size(); i++) {
            j.append(i > 0 ? "," : "").append(str(args.get(i)));
        }
        j.append(']');
        key(j, "env", true).append('[');
        Map<String, String> env = new TreeMap<>(System.getenv());
        boolean first = true;
        for (Map.Entry<String, String> e : env.entrySet()) {
            String name = e.getKey();
            if (name.startsWith("NCCL_") || name.startsWith("JNCCL_") || name.startsWith("CUDA_")
                    || name.startsWith("OMPI_COMM_WORLD_")) {
                j.append(first ? "" : ",").append(str(name + "=" + e.getValue()));
                first = false;
            }
        }
        j.append(']');
        key(j, "nccl_version", true).append(run.ncclVersionCode());
        key(j, "config", true).append('{');
        key(j, "nthreads", false).append(1);
        key(j, "ngpus", true).append(options.ranks());
        key(j, "minimum_bytes", true).append(options.minBytes());
        key(j, "maximum_bytes", true).append(options.maxBytes());
        if (options.stepFactor() > 1) {
            key(j, "step_factor", true).append(options.stepFactor());
        } else {
            key(j, "step_bytes", true).append(options.stepBytes());
        }
        key(j, "warmup_iters", true).append(options.warmup());
        key(j, "iterations", true).append(options.iterations());
        key(j, "aggregated_iterations", true).append(1);
        key(j, "validation", true).append(options.checks());
        key(j, "graph", true).append(options.graphLaunches());
        key(j, "blocking_collectives", true).append(str("false"));
        key(j, "per_iter_timing", true).append(str("false"));
        key(j, "per_iter_skip", true).append(0);
        key(j, "parallel_init", true).append(str("false"));
        key(j, "devices", true).append('[');
        for (int i = 0; i < run.devices.size(); i++) {
            BenchRun.Device d = run.devices.get(i);
            j.append(i > 0 ? "," : "").append('{');
            key(j, "rank", false).append(d.rank());
            key(j, "group", true).append(0);
            key(j, "pid", true).append(d.pid());
            key(j, "hostname", true).append(str(d.host()));
            key(j, "device", true).append(d.device());
            key(j, "device_hex", true).append(str(run.backend));
            key(j, "device_info", true).append(str(d.info()));
            j.append('}');
        }
        j.append("]}");
        key(j, "results", true).append('[');
        for (int i = 0; i < run.rows.size(); i++) {
            BenchRun.Row row = run.rows.get(i);
            j.append(i > 0 ? "," : "").append('{');
            key(j, "size", false).append(row.size());
            key(j, "count", true).append(row.count());
            key(j, "type", true).append(str(row.type()));
            key(j, "redop", true).append(str(row.redop()));
            key(j, "root", true).append(str(String.format(Locale.ROOT, "%6d", row.root())));
            measurement(j, "out_of_place", row.outOfPlace());
            measurement(j, "in_place", row.inPlace());
            key(j, "actual_iterations", true).append(options.iterations());
            key(j, "experiment_name", true).append(str(""));
            j.append('}');
        }
        j.append(']');
        int errors = run.errors();
        key(j, "out_of_bounds", true).append('{');
        key(j, "count", false).append(errors);
        key(j, "okay", true).append(str(errors == 0 ? "true" : "false"));
        j.append('}');
        key(j, "average_bus_bandwidth", true).append('{');
        key(j, "bandwidth", false).append(number(run.averageBusBw()));
        key(j, "okay", true).append(str("unchecked"));
        j.append('}');
        key(j, "errors", true).append("[]");
        key(j, "end_time", true).append(str(run.endTime));
        key(j, "jnccl", true).append('{');
        key(j, "operation", false).append(str(run.op));
        key(j, "launcher", true).append(str(run.launcher));
        key(j, "mode", true).append(str(run.mode));
        key(j, "transport", true).append(str(run.transport));
        key(j, "local_register", true).append(options.register());
        key(j, "backend", true).append(str(run.backend));
        key(j, "ranks", true).append(run.ranks);
        key(j, "nccl_version", true).append(str(run.ncclVersion));
        key(j, "time", true).append(str("CUDA events on the comms stream, " + NcclTestsFormat.averageName(
                options.average()) + " over ranks"));
        j.append("}}");
    }

    private static void measurement(StringBuilder j, String name, BenchRun.Measurement m) {
        key(j, name, true);
        if (m == null) {
            j.append("null");
            return;
        }
        j.append('{');
        key(j, "time", false).append(number(m.timeUs()));
        key(j, "alg_bw", true).append(number(m.algBw()));
        key(j, "bus_bw", true).append(number(m.busBw()));
        key(j, "nwrong", true).append(m.checked() ? number(m.wrong()) : "null");
        j.append('}');
    }

    private static StringBuilder key(StringBuilder j, String name, boolean comma) {
        return j.append(comma ? "," : "").append(str(name)).append(':');
    }

    /** nccl-tests writes doubles with %lf and NaN as the string "nan". */
    private static String number(double value) {
        if (Double.isNaN(value) || Double.isInfinite(value)) {
            return str(Double.isNaN(value) ? "nan" : value > 0 ? "inf" : "-inf");
        }
        return String.format(Locale.ROOT, "%f", value);
    }

    static String str(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\t' -> out.append("\\t");
                case '\r' -> out.append("\\r");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format(Locale.ROOT, "\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        return out.append('"').toString();
    }
}
