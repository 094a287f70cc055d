package dev.jnccl.examples.bench;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The {@code --svg} file: bus bandwidth against size (log scale, base 2), one line per run
 * (transport), type, reduction and placement, with axes, tick labels, a title naming the backend
 * and a legend. Self-contained SVG 1.1 (no scripts, no external fonts or styles).
 */
final class SvgPlot {
    private static final int WIDTH = 960;
    private static final int HEIGHT = 560;
    private static final int LEFT = 80;
    private static final int RIGHT = 250;
    private static final int TOP = 70;
    private static final int BOTTOM = 70;
    private static final String[] COLORS = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
        "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

    private SvgPlot() {}

    /** One line: a label and (size in bytes, busbw in GB/s) points in size order. */
    record Series(String label, List<double[]> points, boolean dashed) {}

    static String render(List<BenchRun> runs, BenchOptions options) {
        List<Series> series = new ArrayList<>();
        for (BenchRun run : runs) {
            Map<String, List<double[]>> outOfPlace = new LinkedHashMap<>();
            Map<String, List<double[]>> inPlace = new LinkedHashMap<>();
            for (BenchRun.Row row : run.rows) {
                if (row.size() <= 0) {
                    continue; // no place on a log axis
                }
                String key = run.transport + (options.types().size() > 1 ? " " + row.type() : "")
                        + (options.opsToRun().size() > 1 ? " " + row.redop() : "");
                if (row.outOfPlace() != null) {
                    outOfPlace.computeIfAbsent(key, k -> new ArrayList<>()).add(new double[] {row.size(),
                        row.outOfPlace().busBw()});
                }
                if (row.inPlace() != null) {
                    inPlace.computeIfAbsent(key, k -> new ArrayList<>()).add(new double[] {row.size(),
                        row.inPlace().busBw()});
                }
            }
            outOfPlace.forEach((k, v) -> series.add(new Series(k + ", out-of-place", v, false)));
            inPlace.forEach((k, v) -> series.add(new Series(k + ", in-place", v, true)));
        }
        BenchRun first = runs.get(0);
        String title = String.format(Locale.ROOT, "jnccl %s: bus bandwidth, %d rank(s), %s launcher, %s", first.op,
                first.ranks, first.launcher, first.isEmulation() ? "HOST EMULATION (not GPU figures)"
                        : "NCCL " + first.ncclVersion);
        String subtitle = "busbw = algbw x " + busFactorText(options.op(), first.ranks)
                + " (nccl-tests); time: CUDA events on the comms stream, " + NcclTestsFormat.averageName(options.average())
                + " over ranks";
        return render(title, subtitle, series);
    }

    private static String busFactorText(CollectiveOp op, int ranks) {
        return String.format(Locale.ROOT, "%.3g", op.busFactor(ranks));
    }

    static String render(String title, String subtitle, List<Series> series) {
        double minX = Double.MAX_VALUE;
        double maxX = 0;
        double maxY = 0;
        for (Series s : series) {
            for (double[] p : s.points()) {
                minX = Math.min(minX, p[0]);
                maxX = Math.max(maxX, p[0]);
                if (Double.isFinite(p[1])) {
                    maxY = Math.max(maxY, p[1]);
                }
            }
        }
        if (maxX == 0) {
            minX = 1;
            maxX = 2;
        }
        int log2Min = (int) Math.floor(Math.log(minX) / Math.log(2));
        int log2Max = Math.max(log2Min + 1, (int) Math.ceil(Math.log(maxX) / Math.log(2)));
        double yTick = niceStep(maxY > 0 ? maxY / 5 : 0.2);
        double yMax = Math.max(yTick, Math.ceil(maxY / yTick) * yTick);
        int plotW = WIDTH - LEFT - RIGHT;
        int plotH = HEIGHT - TOP - BOTTOM;
        final int lo = log2Min;
        final int hi = log2Max;
        java.util.function.DoubleUnaryOperator px = x -> LEFT + (Math.log(x) / Math.log(2) - lo) / (hi - lo) * plotW;
        java.util.function.DoubleUnaryOperator py = y -> TOP + plotH - Math.min(y, yMax) / yMax * plotH;

        StringBuilder svg = new StringBuilder();
        svg.append("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        svg.append(String.format(Locale.ROOT, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" "
                + "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">%n", WIDTH, HEIGHT,
                WIDTH, HEIGHT, WIDTH, HEIGHT));
        svg.append(String.format(Locale.ROOT, "<title>%s</title>%n", xml(title)));
        svg.append(String.format(Locale.ROOT, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>%n",
                WIDTH, HEIGHT));
        svg.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"28\" font-size=\"16\" font-weight=\"bold\">%s</text>%n",
                LEFT, xml(title)));
        svg.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"48\" fill=\"#555\">%s</text>%n", LEFT,
                xml(subtitle)));
        // grid and ticks
        int step = Math.max(1, (int) Math.ceil((hi - lo) / 12.0));
        for (int e = lo; e <= hi; e += step) {
            double x = px.applyAsDouble(Math.scalb(1.0, e));
            svg.append(String.format(Locale.ROOT, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>%n",
                    x, TOP, x, TOP + plotH));
            svg.append(String.format(Locale.ROOT, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>%n", x,
                    TOP + plotH + 18, xml(sizeLabel(e))));
        }
        for (double y = 0; y <= yMax + yTick / 2; y += yTick) {
            double yy = py.applyAsDouble(y);
            svg.append(String.format(Locale.ROOT, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>%n",
                    LEFT, yy, LEFT + plotW, yy));
            svg.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>%n", LEFT - 6,
                    yy + 4, xml(NcclTestsFormat.cG(Math.round(y * 1e6) / 1e6))));
        }
        svg.append(String.format(Locale.ROOT, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
                + "stroke=\"#000\"/>%n", LEFT, TOP, plotW, plotH));
        svg.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">size (bytes, log scale)"
                + "</text>%n", LEFT + plotW / 2, HEIGHT - 25));
        svg.append(String.format(Locale.ROOT, "<text x=\"20\" y=\"%d\" text-anchor=\"middle\" transform=\"rotate(-90 20 "
                + "%d)\">bus bandwidth (GB/s)</text>%n", TOP + plotH / 2, TOP + plotH / 2));
        // lines and legend (the legend squeezes to fit the plot's height)
        double legendStep = series.isEmpty() ? 20 : Math.min(20, (plotH - 10) / (double) series.size());
        for (int i = 0; i < series.size(); i++) {
            Series s = series.get(i);
            String color = COLORS[i % COLORS.length];
            StringBuilder points = new StringBuilder();
            for (double[] p : s.points()) {
                if (Double.isFinite(p[1])) {
                    points.append(String.format(Locale.ROOT, "%.1f,%.1f ", px.applyAsDouble(p[0]), py.applyAsDouble(p[1])));
                }
            }
            svg.append(String.format(Locale.ROOT, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s "
                    + "points=\"%s\"/>%n", color, s.dashed() ? " stroke-dasharray=\"6 3\"" : "", points.toString().trim()));
            for (double[] p : s.points()) {
                if (Double.isFinite(p[1])) {
                    svg.append(String.format(Locale.ROOT, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>%n",
                            px.applyAsDouble(p[0]), py.applyAsDouble(p[1]), color));
                }
            }
            int ly = TOP + 10 + (int) (i * legendStep);
            int lx = LEFT + plotW + 15;
            svg.append(String.format(Locale.ROOT, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" "
                    + "stroke-width=\"2\"%s/>%n", lx, ly, lx + 30, ly, color, s.dashed() ? " stroke-dasharray=\"6 3\"" : ""));
            svg.append(String.format(Locale.ROOT, "<text x=\"%d\" y=\"%d\"%s>%s</text>%n", lx + 36, ly + 4,
                    legendStep < 14 ? " font-size=\"9\"" : "", xml(s.label())));
        }
        svg.append("</svg>\n");
        return svg.toString();
    }

    /** 1, 2 or 5 times a power of ten, at least {@code raw}. */
    private static double niceStep(double raw) {
        double power = Math.pow(10, Math.floor(Math.log10(raw)));
        for (double m : new double[] {1, 2, 5, 10}) {
            if (m * power >= raw) {
                return m * power;
            }
        }
        return 10 * power;
    }

    private static String sizeLabel(int log2) {
        if (log2 < 10) {
            return (1L << Math.max(0, log2)) + " B";
        }
        String[] units = {"KiB", "MiB", "GiB", "TiB"};
        int unit = Math.min(log2 / 10, 4) - 1;
        return (1L << (log2 - 10 * (unit + 1))) + " " + units[unit];
    }

    private static String xml(String text) {
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\"", "&quot;");
    }
}
