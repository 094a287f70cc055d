package dev.jnccl.examples.bench;

import java.io.PrintStream;
import java.math.BigDecimal;
import java.math.MathContext;
import java.util.Locale;

/**
 * nccl-tests' text output, column for column: the header block, the two-line column header, one
 * line per row ({@code size count type redop root}, then {@code time algbw busbw #wrong} out of
 * place and in place) and the footer ({@code # Out of bounds values}, {@code # Avg bus bandwidth},
 * {@code # Collective test concluded}). Widths and number formats are nccl-tests' (its
 * {@code getFloatStr} and C's {@code %g}), so tools that parse nccl-tests read this too.
 */
final class NcclTestsFormat {
    /** The nccl-tests release whose output layout this follows. */
    static final String NCCL_TESTS_LAYOUT = "2.19";

    private NcclTestsFormat() {}

    static void header(PrintStream out, BenchRun run, BenchOptions options, String jncclVersion) {
        out.printf("# jnccl %s benchmark (nccl-tests %s output) nccl-library=%d backend=%s%n", jncclVersion,
                NCCL_TESTS_LAYOUT, run.ncclVersionCode(), run.backend);
        out.printf("# Collective test starting: %s%n", run.programName());
        out.printf("# nThread %d nGpus %d minBytes %d maxBytes %d step: %d(%s) warmup iters: %d iters: %d agg iters: %d "
                        + "validation: %d graph: %d unalign: %d%n", 1, options.ranks(), options.minBytes(),
                options.maxBytes(), options.stepFactor() > 1 ? options.stepFactor() : options.stepBytes(),
                options.stepFactor() > 1 ? "factor" : "bytes", options.warmup(), options.iterations(), 1,
                options.checks(), options.graphLaunches(), 0);
        out.printf("# jnccl: launcher %s, mode %s, transport %s, %d rank(s); time: CUDA events on the comms stream, %s over ranks%n",
                run.launcher, run.mode, run.transport, run.ranks, averageName(options.average()));
        out.printf("# jnccl: buffers from ncclMemAlloc, %s%n", options.register() == 1
                ? "registered with each rank's communicator (ncclCommRegister; local_register: 1)"
                : "not registered (local_register: 0)");
        if (!options.op().inPlace()) {
            out.printf("# jnccl: %s has no in-place form in jnccl's API: in-place columns left empty%n", run.op);
        }
        if (run.isEmulation()) {
            out.println("# jnccl: HOST EMULATION (no GPU): host memory copies by the emulation's threads, not GPU figures");
        }
        out.println("#");
        out.println("# Using devices");
        for (BenchRun.Device d : run.devices) {
            out.printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s%n", d.rank(), 0, d.pid(), d.host(),
                    d.device(), run.backend, d.info());
        }
        out.println("#");
        out.printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          %n", "", "",
                "", "", "");
        out.printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s%n", "size", "count", "type",
                "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "");
        out.printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %s%n", "(B)", "(elements)", "",
                "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "");
        out.flush();
    }

    static String row(BenchRun.Row row) {
        StringBuilder line = new StringBuilder(String.format(Locale.ROOT, "%12d  %12d  %8s  %6s  %6d", row.size(),
                row.count(), row.type(), row.redop(), row.root()));
        body(line, row.outOfPlace());
        body(line, row.inPlace());
        return line.toString();
    }

    private static void body(StringBuilder line, BenchRun.Measurement m) {
        if (m == null) {
            line.append(" ".repeat(32)); // nccl-tests' writeBenchMarkLineNullBody
            return;
        }
        line.append(String.format(Locale.ROOT, "  %7s  %6s  %6s", floatStr(m.timeUs(), 7), floatStr(m.algBw(), 6),
                floatStr(m.busBw(), 6)));
        line.append(m.checked() ? String.format(Locale.ROOT, "  %6s", cG(m.wrong())) : "    N/A");
    }

    static void footer(PrintStream out, BenchRun run) {
        int errors = run.errors();
        out.printf("# %-20s : %d %s%n", "Out of bounds values", errors, errors != 0 ? "FAILED" : "OK");
        out.printf("# %-20s : %s %s%n", "Avg bus bandwidth", cG(run.averageBusBw()), "");
        out.println("#");
        out.printf("# Collective test concluded: %s%n", run.programName());
        out.println("#");
        out.println();
        out.flush();
    }

    static String averageName(int average) {
        return switch (average) {
            case 0 -> "rank 0's";
            case 1 -> "mean";
            case 2 -> "minimum";
            default -> "maximum";
        };
    }

    /**
     * nccl-tests' getFloatStr: {@code value} in {@code width} characters, with 2 decimals when they
     * fit, else 1, else 0, else in exponent form.
     */
    static String floatStr(double value, int width) {
        for (String format : new String[] {"%" + width + ".2f", "%" + width + ".1f", "%" + width + ".0f"}) {
            String s = String.format(Locale.ROOT, format, value);
            if (s.length() <= width) {
                return s;
            }
        }
        return String.format(Locale.ROOT, width >= 7 ? "%" + width + ".1e" : "%" + width + ".0e", value);
    }

    /** C's {@code %g}: 6 significant digits, trailing zeros dropped, exponent form below 1e-4 and from 1e6. */
    static String cG(double value) {
        if (Double.isNaN(value)) {
            return "nan";
        }
        if (Double.isInfinite(value)) {
            return value > 0 ? "inf" : "-inf";
        }
        if (value == 0) {
            return "0";
        }
        BigDecimal rounded = new BigDecimal(value).round(new MathContext(6));
        int exponent = rounded.precision() - rounded.scale() - 1;
        if (exponent < -4 || exponent >= 6) {
            String mantissa = trim(rounded.movePointLeft(exponent).setScale(5, java.math.RoundingMode.HALF_EVEN)
                    .toPlainString());
            return String.format(Locale.ROOT, "%se%s%02d", mantissa, exponent < 0 ? "-" : "+", Math.abs(exponent));
        }
        return trim(rounded.setScale(Math.max(0, 5 - exponent), java.math.RoundingMode.HALF_EVEN).toPlainString());
    }

    private static String trim(String number) {
        if (!number.contains(".")) {
            return number;
        }
        String s = number.replaceAll("0+$", "");
        return s.endsWith(".") ? s.substring(0, s.length() - 1) : s;
    }
}
