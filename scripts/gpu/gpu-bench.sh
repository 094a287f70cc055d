#!/usr/bin/env bash
# Host cost of a transaction and of an all-reduce enqueue, world size 1 on device 0, three ways:
# from C (examples/src/main/c/transaction_overhead.c), through jnccl's raw FFM bindings and
# through jnccl (JMH, dev.jnccl.examples.bench.HostCostBenchmark). Prints a summary table and
# keeps the full logs. Run from anywhere; it works in the repository root.
#
#   scripts/gpu/gpu-bench.sh [--host] [JMH arguments...]
#
# Default (GPU machine, no JDK or Maven needed): real NCCL and CUDA (jnccl.backend=cuda).
#   needs  .gpu/jnccl-bundle.tar.xz (scripts/stage-gpu.sh, built elsewhere): its JMH jar and Java runtime;
#          or, as before, .gpu/jnccl-benchmarks.jar (or examples/target/jnccl-benchmarks.jar) and
#          .gpu/jre.tar.gz (unpacked to /tmp/jre) or $JAVA / $JAVA_HOME
#          nvcc (PATH or /usr/local/cuda/bin), nccl.h and libnccl.so where nvcc finds them
# --host (any Linux machine, no GPU): jnccl's host emulation (jnccl.backend=host); the C program is
#   built with gcc against the libjnccl_host.so inside the benchmark jar, with the emulation's own
#   ABI header (bindings/src/main/c, -DJNCCL_HOST_ABI: no NVIDIA headers needed). scripts/cpu-bench.sh
#   is this mode.
#
# Two parts, chosen by $PARTS (default "host graph"):
#   host   a transaction and an all-reduce enqueue (C cases transaction, all_reduce, all_reduce_ordered;
#          JMH transaction*, allReduceEnqueue*)
#   graph  a training step of K = 1, 8, 32 transactions, enqueued one by one or replayed from a CUDA
#          graph (C cases graph_step_eager, graph_replay, graph_replay_ordered, with -m blocking unless $C_ARGS says
#          otherwise; JMH graphStepEager, graphReplay); PARTS=graph runs only this, quickly.
# Extra arguments go to JMH (e.g. -wi 1 -i 3 for a quicker run); $C_ARGS to the C program, both parts
# (e.g. C_ARGS="-n 20000 -r 3"); $GRAPH_C_ARGS to the graph part's C run only, after its own
# options (e.g. GRAPH_C_ARGS="--graph-transactions 8,32"). Logs and results go to $OUT when it is
# set, else to a new /tmp/jnccl-bench.XXXXXX: c.txt, c-graph.txt, jmh.txt, jmh.csv, host-only.csv,
# summary.txt, environment.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

mode=gpu
if [ "${1:-}" = "--host" ]; then
  mode=host
  shift
fi
parts=" ${PARTS:-host graph} "
for part in $parts; do
  case $part in
    host | graph) ;;
    *) echo "gpu-bench.sh: PARTS=\"${PARTS:-}\": each part is host or graph" >&2; exit 2 ;;
  esac
done
has_part() { [[ $parts == *" $1 "* ]]; }

if [ -n "${OUT:-}" ]; then
  out=$OUT
  mkdir -p "$out"
else
  out=$(mktemp -d /tmp/jnccl-bench.XXXXXX)
fi
work=$(mktemp -d /tmp/jnccl-bench-build.XXXXXX)
trap 'rm -rf "$work"' EXIT

log() { echo "gpu-bench.sh: $*" >&2; }

# The bundle that scripts/stage-gpu.sh packed (GPU machine): its JMH jar and Java runtime.
bundle=""
if [ "$mode" = gpu ] && . "$root/scripts/gpu/lib/gpu-bundle.sh" && gpu_bundle_archive "$root" >/dev/null; then
  bundle=$(gpu_bundle)
fi

# ---------------------------------------------------------------- the benchmark jar
jar=""
for candidate in "${JNCCL_BENCH_JAR:-}" "${bundle:+$bundle/jmh/jnccl-benchmarks.jar}" "$root/.gpu/jnccl-benchmarks.jar" \
    "$root/examples/target/jnccl-benchmarks.jar"; do
  if [ -n "$candidate" ] && [ -s "$candidate" ]; then jar=$candidate; break; fi
done
if [ -z "$jar" ]; then
  log "no benchmark jar: build it with './mvnw -B -q install -DskipTests -Djnccl.skipSanitizers=true'"
  log "(examples/target/jnccl-benchmarks.jar) and, for the GPU machine, copy it to .gpu/jnccl-benchmarks.jar"
  exit 1
fi

# ---------------------------------------------------------------- java
java_bin=""
if [ -n "${JAVA:-}" ]; then
  java_bin=$JAVA
elif [ -n "$bundle" ]; then
  java_bin=$bundle/runtime/bin/java
elif [ "$mode" = gpu ] && [ -x /tmp/jre/bin/java ]; then
  java_bin=/tmp/jre/bin/java
elif [ "$mode" = gpu ] && [ -s "$root/.gpu/jre.tar.gz" ]; then
  tar xzf "$root/.gpu/jre.tar.gz" -C /tmp
  java_bin=/tmp/jre/bin/java
elif [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
  java_bin=$JAVA_HOME/bin/java
else
  for dir in /usr/lib/jvm/*25* /usr/lib/jvm/*; do
    if [ -x "$dir/bin/java" ] && "$dir/bin/java" -version 2>&1 | grep -Eq 'version "(2[5-9]|[3-9][0-9])'; then
      java_bin=$dir/bin/java
      break
    fi
  done
  if [ -z "$java_bin" ] && [ -s "$root/.gpu/jre.tar.gz" ]; then
    tar xzf "$root/.gpu/jre.tar.gz" -C /tmp
    java_bin=/tmp/jre/bin/java
  fi
fi
if [ -z "$java_bin" ]; then
  log "no Java 25+: set JAVA or JAVA_HOME, or provide .gpu/jre.tar.gz"
  exit 1
fi

# The same shared libraries for C and Java (jnccl dlopens libcudart.so.13 / libnccl.so.2).
if [ "$mode" = gpu ] && [ -d /usr/local/cuda/lib64 ]; then
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# ---------------------------------------------------------------- environment
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "mode: $mode"
  echo "host: $(hostname)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') ($(nproc) cpus available)"
  echo "kernel: $(uname -r)"
  echo "load: $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min)"
  echo "java: $java_bin"
  "$java_bin" -version 2>&1 | sed 's/^/  /'
  echo "jar: $jar ($(stat -c %s "$jar") bytes)"
  if command -v git >/dev/null && git -C "$root" rev-parse HEAD >/dev/null 2>&1; then
    echo "commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- || echo ' (+ local changes)')"
  fi
  if [ "$mode" = gpu ] && command -v nvidia-smi >/dev/null; then
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader -i 0 2>/dev/null)"
  fi
} > "$out/environment.txt"
cat "$out/environment.txt"

# ---------------------------------------------------------------- C
c_src=$root/examples/src/main/c/transaction_overhead.c
c_bin=$work/transaction_overhead
if [ "$mode" = gpu ]; then
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  [ -x "$nvcc" ] || { log "no nvcc (PATH, /usr/local/cuda/bin)"; exit 1; }
  build=("$nvcc" -O2 -cudart shared -o "$c_bin" "$c_src" -lnccl -lpthread)
  backend=cuda
else
  # The emulation the jar itself uses.
  lib=dev/jnccl/bindings/host/linux-$(uname -m | sed 's/amd64/x86_64/')/libjnccl_host.so
  if command -v unzip >/dev/null; then
    unzip -q -o -j "$jar" "$lib" -d "$work"
  else
    (cd "$work" && "$(dirname "$java_bin")/jar" xf "$jar" "$lib" && mv "$lib" .)
  fi
  build=(${CC:-gcc} -O2 -pthread -DJNCCL_HOST_ABI -I"$root/bindings/src/main/c" -o "$c_bin" "$c_src" -L"$work"
         -l:libjnccl_host.so -Wl,-rpath,"$work")
  backend=host
fi
log "building the C program: ${build[*]}"
"${build[@]}"
{
  echo "C program: ${build[*]}"
  ldd "$c_bin" 2>/dev/null | grep -E 'nccl|cudart|jnccl' | sed 's/^[[:space:]]*/  /' || true
} | tee -a "$out/environment.txt"
status=0
: > "$out/c.txt"
: > "$out/c-graph.txt"
if has_part host; then
  log "running the C program (${C_ARGS:-defaults})"
  # shellcheck disable=SC2086
  "$c_bin" ${C_ARGS:-} | tee "$out/c.txt" || { log "the C program failed"; status=1; }
fi
if has_part graph; then
  # Blocking: the communicator jnccl's default mode (BLOCKING_SPLIT) runs its work on.
  graph_c_args="-m blocking ${C_ARGS:-} --cases graph_step_eager,graph_replay,graph_replay_ordered ${GRAPH_C_ARGS:-}"
  log "running the C program, graph step ($graph_c_args)"
  # shellcheck disable=SC2086
  "$c_bin" $graph_c_args | tee "$out/c-graph.txt" || { log "the C program (graph step) failed"; status=1; }
fi

# ---------------------------------------------------------------- JMH
jmh_args=("$@")
# The benchmarks of the parts chosen (JMH takes a regular expression), and how many results they give.
if has_part host && has_part graph; then
  jmh_regex=HostCostBenchmark expected=12
elif has_part host; then
  jmh_regex='HostCostBenchmark\.(transaction|allReduce)' expected=6
else
  jmh_regex='HostCostBenchmark\.graph' expected=6
fi
log "running JMH (backend $backend): $jmh_regex ${jmh_args[*]:-}"
(cd "$work" && "$java_bin" --enable-native-access=ALL-UNNAMED -jar "$jar" "$jmh_regex" \
    -jvmArgsAppend "-Djnccl.backend=$backend" -rf csv -rff "$out/jmh.csv" "${jmh_args[@]}") 2>&1 | tee "$out/jmh.txt" \
  || { log "JMH failed"; status=1; }
if ! grep -q "backend $backend" "$out/jmh.txt"; then
  log "JMH did not report backend $backend: see $out/jmh.txt"
  status=1
fi
[ -f "$out/jmh.csv" ] || : > "$out/jmh.csv"
results=$(grep -c HostCostBenchmark "$out/jmh.csv" || true)
if [ "$results" -lt "$expected" ]; then
  log "JMH produced $results of $expected results (a benchmark failed? see $out/jmh.txt)"
  status=1
fi

# ---------------------------------------------------------------- summary
label=$([ "$mode" = gpu ] && echo "CUDA + NCCL" || echo "host emulation")
# The start of the summaries' awk programs: result_fields(line, f) fills f with the key=value fields of
# one of the C program's "RESULT ..." lines (f["case"], f["median_us"], ...); 0 for any other line.
# shellcheck disable=SC2016
result_fields='
  function result_fields(line, f,    n, i, kv, p) {
    if (line !~ /^RESULT /) return 0
    delete f
    n = split(line, kv, " ")
    for (i = 2; i <= n; i++) { split(kv[i], p, "="); f[p[1]] = p[2] }
    return 1
  }
'
# Host-only (synchronizations left out) figures of the Java benchmarks: the mean of the
# measurement iterations' "# host-only <benchmark>[<comm>] measurement: X us/op" lines (the graph
# step benchmarks: <benchmark>[k=<K>]).
grep -o '# host-only [^ ]* measurement: [0-9.]* us/op' "$out/jmh.txt" \
  | awk '{ n[$3]++; sum[$3] += $5 } END { for (k in n) printf "%s,%.3f\n", k, sum[k] / n[k] }' > "$out/host-only.csv" \
  || true
{
  if has_part host; then
    echo "host cost per operation, us/op ($label; world 1, device 0, 1024 x FP32, comms stream synchronized every 256 ops)"
    awk -F, "$result_fields"'
      FILENAME ~ /c\.txt$/ {
        if (!result_fields($0, f)) next
        c[f["case"] "/" f["comm"]] = f["median_us"]
        ce[f["case"] "/" f["comm"]] = f["enqueue_median_us"]
        next
      }
      FILENAME ~ /host-only\.csv$/ { host[$1] = $2; next }
      FNR == 1 { next }                             # jmh.csv header
      {
        for (i = 1; i <= NF; i++) gsub(/"/, "", $i)
        bench = $1; sub(/.*\./, "", bench)
        score = $5; comm = $8
        if (bench == "transaction") { jn["transaction"] = score; jh["transaction"] = host[bench] }
        else if (bench == "allReduceEnqueue") { jn["all_reduce_ordered"] = score; jh["all_reduce_ordered"] = host[bench] }
        else if (bench == "transactionRawBindings") {
          raw["transaction/" comm] = score; rh["transaction/" comm] = host[bench "[" comm "]"]
        } else if (bench == "allReduceEnqueueRaw") {
          raw["all_reduce/" comm] = score; rh["all_reduce/" comm] = host[bench "[" comm "]"]
        }
      }
      function v(x) { return (x == "") ? "-" : sprintf("%.3f", x) }
      END {
        fmt = "%-18s %-12s %8s %8s | %8s %8s | %8s %8s | %8s %8s\n"
        printf fmt, "", "", "C", "", "raw FFM", "", "jnccl", "", "jnccl/C", ""
        printf fmt, "case", "comm", "us/op", "host", "us/op", "host", "us/op", "host", "us/op", "host"
        split("transaction all_reduce all_reduce_ordered", cases, " ")
        split("nonblocking blocking", comms, " ")
        for (k = 1; k <= 3; k++) for (m = 1; m <= 2; m++) {
          key = cases[k] "/" comms[m]
          cv = c[key]; ev = ce[key]; jv = jn[cases[k]]; jhv = jh[cases[k]]
          r1 = (cv != "" && jv != "" && cv + 0 > 0) ? sprintf("%.2f", jv / cv) : "-"
          r2 = (ev != "" && jhv != "" && ev + 0 > 0) ? sprintf("%.2f", jhv / ev) : "-"
          printf fmt, cases[k], comms[m], v(cv), v(ev), v(raw[key]), v(rh[key]), v(jv), v(jhv), r1, r2
        }
        if (c["all_reduce/blocking"] != "" && jn["all_reduce_ordered"] != "")
          printf "jnccl comm.allReduce vs C ncclAllReduce alone (blocking comm): %.3f / %.3f us/op = %.2f\n",
            jn["all_reduce_ordered"], c["all_reduce/blocking"], jn["all_reduce_ordered"] / c["all_reduce/blocking"]
        print ""
        print "us/op: all included (C: median of repetitions; raw FFM, jnccl: JMH average). host: the same without"
        print "  the time spent in the every-256 synchronization, i.e. the host-only cost; when it is far below us/op"
        print "  the device (or the emulation stream threads) set the pace, not the host."
        print "transaction        = ready wait + ncclGroupStart + reduce-scatter + all-gather + ncclGroupEnd + signal"
        print "all_reduce         = ncclAllReduce alone (raw FFM: HostCostBenchmark.allReduceEnqueueRaw)"
        print "all_reduce_ordered = the calls of jnccl comm.allReduce(t, SUM, stream): event record + stream wait,"
        print "                     ncclAllReduce in a group, event record + stream wait (jnccl: allReduceEnqueue)"
        print "comm: the communicator of C and raw FFM (ncclConfig_t.blocking). jnccl runs its own communicator mode"
        print "  (default BLOCKING_SPLIT: created non-blocking, its work on a blocking child split from it), so"
        print "  its figures repeat on both rows and jnccl/C compares them with either."
      }
    ' "$out/c.txt" "$out/host-only.csv" "$out/jmh.csv"
  fi
  if has_part graph; then
    has_part host && echo
    echo "graph step, us/step ($label; world 1, device 0, 1024 x FP32, a step = K transactions, synchronized every 256 steps)"
    awk -F, "$result_fields"'
      FILENAME ~ /c-graph\.txt$/ {
        if (!result_fields($0, f)) next
        k = f["k"]; comm = f["comm"]
        if (!((k, comm) in seen)) { seen[k, comm] = 1; rows[nrows++] = k SUBSEP comm }
        c[f["case"], k, comm] = f["median_us"]; ch[f["case"], k, comm] = f["enqueue_median_us"]
        next
      }
      FILENAME ~ /host-only\.csv$/ { host[$1] = $2; next }
      { sub(/\r$/, "") }                           # JMH writes its CSV with CRLF line ends
      FNR == 1 {                                    # jmh.csv header: the columns by name
        for (i = 1; i <= NF; i++) { gsub(/"/, "", $i); col[$i] = i }
        next
      }
      {
        for (i = 1; i <= NF; i++) gsub(/"/, "", $i)
        bench = $col["Benchmark"]; sub(/.*\./, "", bench)
        if (bench != "graphStepEager" && bench != "graphReplay") next
        k = $col["Param: transactions"]
        jn[bench, k] = $col["Score"]; jh[bench, k] = host[bench "[k=" k "]"]
      }
      function v(x) { return (x == "") ? "-" : sprintf("%.3f", x) }
      function r(a, b) { return (a != "" && b != "" && b + 0 > 0) ? sprintf("%.2f", a / b) : "-" }
      END {
        fmt = "%-4s %-11s | %8s %8s | %8s %8s | %8s %8s | %8s %8s | %8s %8s | %8s %8s | %8s | %8s\n"
        printf fmt, "", "", "C", "eager", "C", "graph", "C graph", "ordered", "jnccl", "eager", "jnccl", "replay", "replay/", "C graph", "replay/", "replay/"
        printf fmt, "K", "C comm", "us", "host", "us", "host", "us", "host", "us", "host", "us", "host", "us", "host", "ord host", "eager"
        for (j = 0; j < nrows; j++) {
          split(rows[j], kc, SUBSEP); k = kc[1]; comm = kc[2]
          ce = c["graph_step_eager", k, comm]; cg = c["graph_replay", k, comm]; co = c["graph_replay_ordered", k, comm]
          je = jn["graphStepEager", k]; jr = jn["graphReplay", k]
          printf fmt, k, comm, v(ce), v(ch["graph_step_eager", k, comm]), v(cg), v(ch["graph_replay", k, comm]),
            v(co), v(ch["graph_replay_ordered", k, comm]), v(je), v(jh["graphStepEager", k]), v(jr), v(jh["graphReplay", k]),
            r(jr, cg), r(jh["graphReplay", k], ch["graph_replay", k, comm]),
            r(jh["graphReplay", k], ch["graph_replay_ordered", k, comm]), r(jr, je)
        }
        print ""
        print "a step = K times (event record on compute + stream wait + ncclGroupStart + reduce-scatter + all-gather, out of place,"
        print "  + ncclGroupEnd), then event record on comms + stream wait of compute (jnccl: comm.begin(compute)..."
        print "  execute(null) K times, comm.waitOnComms(compute))."
        print "C eager = graph_step_eager; C graph = graph_replay: the step captured once, then one"
        print "  cudaGraphLaunch(exec, compute) per step, nothing else; C graph ordered = graph_replay_ordered: that"
        print "  launch + cudaEventRecord(done, compute), the native calls of jnccl replay in a loop on one stream."
        print "  jnccl eager = graphStepEager; jnccl replay = graphReplay:"
        print "  comm.launch(graph, compute). us: all included (C: median of repetitions; jnccl: JMH average); host:"
        print "  the synchronizations left out (C graph cases and jnccl replay synchronize the compute stream)."
        print "  replay/C graph: jnccl replay over C graph (targets: us at most 1.0, host at most 1.2); replay/ord"
        print "  host: over C graph ordered (what is left is jnccl own Java work);"
        print "  replay/eager: jnccl replay over jnccl eager (us). C comm: the C communicator (ncclConfig_t.blocking);"
        print "  jnccl runs its default mode, whose work runs on a blocking communicator split from a non-blocking one."
      }
    ' "$out/c-graph.txt" "$out/host-only.csv" "$out/jmh.csv"
  fi
} | tee "$out/summary.txt"
log "logs in $out"
exit $status
