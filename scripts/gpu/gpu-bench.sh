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
#   built with gcc against the libjnccl_host.so inside the benchmark jar, with nccl.h from
#   $NCCL_INCLUDE (default /opt/headers, else /usr/include) and CUDA's headers from $CUDA_INCLUDE
#   (default /usr/local/cuda/include). scripts/cpu-bench.sh is this mode.
#
# Extra arguments go to JMH (e.g. -wi 1 -i 3 for a quicker run); $C_ARGS to the C program
# (e.g. C_ARGS="-n 20000 -r 3"). Logs and results go to $OUT when it is set, else to a new
# /tmp/jnccl-bench.XXXXXX: c.txt, jmh.txt, jmh.csv, host-only.csv, summary.txt, environment.txt.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

mode=gpu
if [ "${1:-}" = "--host" ]; then
  mode=host
  shift
fi

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
  nccl_include=${NCCL_INCLUDE:-}
  if [ -z "$nccl_include" ]; then
    for d in /opt/headers /usr/include /usr/local/include; do
      if [ -f "$d/nccl.h" ]; then nccl_include=$d; break; fi
    done
  fi
  cuda_include=${CUDA_INCLUDE:-/usr/local/cuda/include}
  [ -n "$nccl_include" ] && [ -f "$nccl_include/nccl.h" ] || { log "no nccl.h: set NCCL_INCLUDE"; exit 1; }
  [ -f "$cuda_include/cuda_runtime.h" ] || { log "no cuda_runtime.h in $cuda_include: set CUDA_INCLUDE"; exit 1; }
  # The emulation the jar itself uses.
  lib=dev/jnccl/bindings/host/linux-$(uname -m | sed 's/amd64/x86_64/')/libjnccl_host.so
  if command -v unzip >/dev/null; then
    unzip -q -o -j "$jar" "$lib" -d "$work"
  else
    (cd "$work" && "$(dirname "$java_bin")/jar" xf "$jar" "$lib" && mv "$lib" .)
  fi
  build=(${CC:-gcc} -O2 -pthread -I"$nccl_include" -I"$cuda_include" -o "$c_bin" "$c_src" -L"$work" -l:libjnccl_host.so
         -Wl,-rpath,"$work")
  backend=host
fi
log "building the C program: ${build[*]}"
"${build[@]}"
{
  echo "C program: ${build[*]}"
  ldd "$c_bin" 2>/dev/null | grep -E 'nccl|cudart|jnccl' | sed 's/^[[:space:]]*/  /' || true
} | tee -a "$out/environment.txt"
log "running the C program (${C_ARGS:-defaults})"
status=0
# shellcheck disable=SC2086
"$c_bin" ${C_ARGS:-} | tee "$out/c.txt" || { log "the C program failed"; status=1; }

# ---------------------------------------------------------------- JMH
jmh_args=("$@")
log "running JMH (backend $backend): HostCostBenchmark ${jmh_args[*]:-}"
(cd "$work" && "$java_bin" --enable-native-access=ALL-UNNAMED -jar "$jar" HostCostBenchmark \
    -jvmArgsAppend "-Djnccl.backend=$backend" -rf csv -rff "$out/jmh.csv" "${jmh_args[@]}") 2>&1 | tee "$out/jmh.txt" \
  || { log "JMH failed"; status=1; }
if ! grep -q "backend $backend" "$out/jmh.txt"; then
  log "JMH did not report backend $backend: see $out/jmh.txt"
  status=1
fi
[ -f "$out/jmh.csv" ] || : > "$out/jmh.csv"
results=$(grep -c HostCostBenchmark "$out/jmh.csv" || true)
if [ "$results" -lt 6 ]; then
  log "JMH produced $results of 6 results (a benchmark failed? see $out/jmh.txt)"
  status=1
fi

# ---------------------------------------------------------------- summary
label=$([ "$mode" = gpu ] && echo "CUDA + NCCL" || echo "host emulation")
{
  echo "host cost per operation, us/op ($label; world 1, device 0, 1024 x FP32, comms stream synchronized every 256 ops)"
  # Host-only (synchronizations left out) figures of the Java benchmarks: the mean of the
  # measurement iterations' "# host-only <benchmark>[<comm>] measurement: X us/op" lines.
  grep -o '# host-only [^ ]* measurement: [0-9.]* us/op' "$out/jmh.txt" \
    | awk '{ n[$3]++; sum[$3] += $5 } END { for (k in n) printf "%s,%.3f\n", k, sum[k] / n[k] }' > "$out/host-only.csv" \
    || true
  awk -F, '
    FILENAME ~ /c\.txt$/ {
      if ($0 !~ /^RESULT /) next
      n = split($0, kv, " ")
      name = ""; comm = ""; us = ""; enq = ""
      for (i = 2; i <= n; i++) {
        split(kv[i], p, "=")
        if (p[1] == "case") name = p[2]
        else if (p[1] == "comm") comm = p[2]
        else if (p[1] == "median_us") us = p[2]
        else if (p[1] == "enqueue_median_us") enq = p[2]
      }
      c[name "/" comm] = us
      ce[name "/" comm] = enq
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
      print "comm: the communicator of C and raw FFM (ncclConfig_t.blocking). jnccl always uses a non-blocking one,"
      print "  so its figures repeat on both rows and jnccl/C compares them with either."
    }
  ' "$out/c.txt" "$out/host-only.csv" "$out/jmh.csv"
} | tee "$out/summary.txt"
log "logs in $out"
exit $status
