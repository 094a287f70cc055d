# Shared by scripts/gpu/gpu-hostcost-multi.sh and scripts/gpu/gpu-hostcost-threads.sh: finds the benchmark jar
# and a Java runtime (the bundle's on the GPU machine), and builds transaction_overhead.c for the
# backend (not with SKIP_C=1). Source it from the repository root after setting: root (the repository root), mode (gpu or
# host), work (a scratch folder) and a `log` function. Sets: bundle, jar, java_bin, backend, c_bin, build.

# CASES=all in both scripts: the transaction and every convenience operation, each case named alike
# in transaction_overhead.c and RankHostCost (the summary tables pair C and jnccl by that name).
hostcost_all_cases=transaction,all_reduce_ordered,reduce_scatter_ordered,broadcast_ordered,all_to_all_ordered
hostcost_all_cases+=,reduce_mean_ordered,reduce_max_ordered,reduce_norm_squared_ordered

hostcost_prepare() {
  # The bundle that scripts/stage-gpu.sh packed (GPU machine): its JMH jar and Java runtime.
  bundle=""
  if . "$root/scripts/gpu/lib/gpu-bundle.sh" && gpu_bundle_archive "$root" >/dev/null; then
    bundle=$(gpu_bundle)
  fi
  jar=""
  local candidate
  for candidate in "${JNCCL_BENCH_JAR:-}" "${bundle:+$bundle/jmh/jnccl-benchmarks.jar}" \
      "$root/examples/target/jnccl-benchmarks.jar"; do
    if [ -n "$candidate" ] && [ -s "$candidate" ]; then jar=$candidate; break; fi
  done
  [ -n "$jar" ] || { log "no benchmark jar (.gpu/jnccl-bundle.tar.xz or examples/target/jnccl-benchmarks.jar)"; return 1; }
  java_bin=${JAVA:-}
  if [ -z "$java_bin" ]; then
    if [ -n "$bundle" ]; then
      java_bin=$bundle/runtime/bin/java
    elif [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
      java_bin=$JAVA_HOME/bin/java
    elif [ -x /usr/lib/jvm/temurin-25-jdk-amd64/bin/java ]; then
      java_bin=/usr/lib/jvm/temurin-25-jdk-amd64/bin/java
    fi
  fi
  [ -n "$java_bin" ] || { log "no Java 25+: set JAVA or JAVA_HOME, or provide .gpu/jnccl-bundle.tar.xz"; return 1; }
  if [ "$mode" = gpu ] && [ -d /usr/local/cuda/lib64 ]; then
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi

  # The C program: nvcc against the machine's CUDA and NCCL, or gcc against the emulation inside the
  # jar with the emulation's own ABI header (no NVIDIA headers needed). SKIP_C=1: not built.
  backend=$([ "$mode" = gpu ] && echo cuda || echo host)
  [ "${SKIP_C:-0}" = 1 ] && return 0
  local c_src=$root/examples/src/main/c/transaction_overhead.c
  c_bin=$work/transaction_overhead
  if [ "$mode" = gpu ]; then
    local nvcc
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    build=("$nvcc" -O2 -cudart shared -o "$c_bin" "$c_src" -lnccl -lpthread)
  else
    local lib
    lib=dev/jnccl/bindings/host/linux-$(uname -m | sed 's/amd64/x86_64/')/libjnccl_host.so
    if command -v unzip >/dev/null; then
      unzip -q -o -j "$jar" "$lib" -d "$work"
    else
      (cd "$work" && "$(dirname "$java_bin")/jar" xf "$jar" "$lib" && mv "$lib" .)
    fi
    build=(${CC:-gcc} -O2 -pthread -DJNCCL_HOST_ABI -I"$root/bindings/src/main/c" -o "$c_bin" "$c_src" -L"$work"
           -l:libjnccl_host.so -Wl,-rpath,"$work")
  fi
  log "building the C program: ${build[*]}"
  "${build[@]}"
}

# The RESULT lines of the given logs (C, jnccl, torch: "RESULT key=value ...") folded over ranks: one
# line per (W, case, impl, mode), W ascending, then in order of first appearance:
#   W case impl mode median_us enqueue_median_us min_us enqueue_min_us
# each figure the largest over the ranks (the slowest rank's); impl C when the line names none, mode
# from mode= or comm=; "-" for a figure no line gave. Missing logs are skipped.
hostcost_slowest() {
  { cat "$@" 2>/dev/null || true; } | { grep -h '^RESULT ' || true; } | awk '
    {
      impl = "C"; mode = "-"; cs = "-"; w = "-"; delete v
      for (i = 2; i <= NF; i++) {
        split($i, p, "=")
        if (p[1] == "impl") impl = p[2]
        else if (p[1] == "case") cs = p[2]
        else if (p[1] == "comm" || p[1] == "mode") mode = p[2]
        else if (p[1] == "world") w = p[2]
        else if (p[1] == "median_us") v[1] = p[2]
        else if (p[1] == "enqueue_median_us") v[2] = p[2]
        else if (p[1] == "min_us") v[3] = p[2]
        else if (p[1] == "enqueue_min_us") v[4] = p[2]
      }
      key = w " " cs " " impl " " mode
      if (!(key in seen)) { seen[key] = n; order[n++] = key }
      for (f = 1; f <= 4; f++) if ((f in v) && (!((key, f) in fig) || v[f] + 0 > fig[key, f] + 0)) fig[key, f] = v[f]
    }
    END {
      for (k = 0; k < n; k++) {
        line = order[k]
        for (f = 1; f <= 4; f++) line = line " " (((order[k], f) in fig) ? fig[order[k], f] : "-")
        print k, line
      }
    }' | sort -s -n -k2,2 -k1,1 | cut -d' ' -f2-
}

# The start of an awk program over hostcost_slowest's lines, for tables of best repetitions: best[key]
# and hbest[key] (all included / host only) by key = W SUBSEP case SUBSEP impl SUBSEP mode, worlds[0..nw-1]
# in order; cell(key, table) gives "-" for a missing figure, ratio(a, b) a / b with 2 decimals or "-".
# shellcheck disable=SC2016
hostcost_awk_best='
  {
    key = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4; best[key] = $7; hbest[key] = $8
    if (!($1 in seenw)) { seenw[$1] = 1; worlds[nw++] = $1 }
  }
  function cell(k, t) { return (k in t) ? t[k] : "-" }
  function ratio(a, b) { return (a != "-" && b != "-" && b + 0 > 0) ? sprintf("%.2f", a / b) : "-" }
'
