#!/usr/bin/env bash
# jnccl's own host cost, paired A/B: for each W, ONE process of W rank threads on device 0
# (dev.jnccl.examples.bench.PairedHostCost) drives the same NCCL communicators alternately through jnccl
# and through its raw twin (the generated bindings making exactly jnccl's native calls), in interleaved
# lock-step blocks, so the GPU's and the CPUs' time slices hit both sides alike. Prints one table: W,
# case, jnccl us/call, raw us/call (medians over the blocks), the median ratio jnccl/raw with its
# interquartile range and min-max, and the host-only ratio (the every-256 synchronizations left out).
#
#   scripts/gpu/gpu-hostcost-paired.sh W... [--host]          e.g. scripts/gpu/gpu-hostcost-paired.sh 1 2
#
# GPU machine (default; no JDK or Maven): needs .gpu/jnccl-bundle.tar.xz (scripts/stage-gpu.sh: its JMH
#   jar and Java runtime) and, for W >= 2, NCCL 2.30+: .gpu/libnccl.so.2.xz (scripts/stage-gpu.sh copies
#   ../shared/nccl-2.30.7-sm90/libnccl.so.2.xz) or JNCCL_MULTI_RANK_NCCL=/path/libnccl.so.2; runs with
#   NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_NVLS_ENABLE=0 and -Djnccl.nccl.library. No C program is built.
# --host (or no nvidia-smi): jnccl's host emulation: checks the script; its figures say nothing about NCCL.
# Environment: BLOCKS (20: blocks of each side per case, >= 2), CALLS (1000 per block), WARMUP_MS (2000:
#   the warm-up of each case lasts at least this long, on every rank), WARMUP (2000: and has at least
#   this many calls of each side), COUNT (1024, divisible by every W), CASES (default all:
#   transaction,all_reduce,reduce_scatter,all_gather,broadcast,all_to_all,reduce_mean,reduce_max,
#   reduce_norm_squared), MODE (jnccl's CommunicatorMode: BLOCKING_SPLIT (default, a non-blocking
#   communicator split into a blocking child) or NON_BLOCKING; the twin drives the same communicator),
#   MAX_LEAD (ThreadsOptions.maxLead, default 0 = jnccl's 8; the twin has no throttle, so at W >= 2 the
#   throttle's waits land in jnccl's host-only figure, MAX_LEAD=65536 takes them out), PIN_CPUS (true, as
#   jnccl's default), OUT (logs; default a new /tmp/jnccl-hostcost-paired.XXXXXX), TIMEOUT per run
#   (default 900 s), JAVA_OPTS (extra JVM flags).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

worlds=()
mode=gpu
for arg in "$@"; do
  case "$arg" in
    --host) mode=host ;;
    *) [[ "$arg" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 W... [--host]" >&2; exit 2; }; worlds+=("$arg") ;;
  esac
done
[ ${#worlds[@]} -gt 0 ] || { echo "usage: $0 W... [--host]" >&2; exit 2; }
command -v nvidia-smi >/dev/null || mode=host
count=${COUNT:-1024}
cases=${CASES:-all}
[ "$cases" = all ] && cases=transaction,all_reduce,reduce_scatter,all_gather,broadcast,all_to_all,reduce_mean,reduce_max,reduce_norm_squared
limit=${TIMEOUT:-900}
log() { echo "gpu-hostcost-paired.sh: $*" >&2; }

if [ -n "${OUT:-}" ]; then out=$OUT; mkdir -p "$out"; else out=$(mktemp -d /tmp/jnccl-hostcost-paired.XXXXXX); fi
work=$(mktemp -d /tmp/jnccl-hostcost-build.XXXXXX)
trap 'rm -rf "$work"' EXIT

SKIP_C=1
. "$root/scripts/gpu/lib/hostcost.sh"
hostcost_prepare

java_nccl=()
if [ "$mode" = gpu ]; then
  . "$root/scripts/gpu/lib/gpu-bundle.sh"
  nccl=$(multi_rank_nccl) || exit 2
  java_nccl=(-Djnccl.nccl.library="$nccl")
  log "NCCL for several ranks per GPU: $nccl"
fi
export NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

status=0
for world in "${worlds[@]}"; do
  if [ $((count % world)) != 0 ]; then log "COUNT $count is not divisible by W=$world"; exit 2; fi
  log "W=$world ($backend): mode ${MODE:-BLOCKING_SPLIT}, ${BLOCKS:-20} blocks of ${CALLS:-1000} calls per side, cases $cases"
  # shellcheck disable=SC2086
  timeout "$limit" "$java_bin" --enable-native-access=ALL-UNNAMED -Djnccl.backend=$backend "${java_nccl[@]}" \
    ${JAVA_OPTS:-} -cp "$jar" dev.jnccl.examples.bench.PairedHostCost --world "$world" --mode "${MODE:-BLOCKING_SPLIT}" \
    --blocks "${BLOCKS:-20}" --calls "${CALLS:-1000}" --warmup-ms "${WARMUP_MS:-2000}" --warmup-calls "${WARMUP:-2000}" \
    --count "$count" --cases "$cases" --pin-cpus "${PIN_CPUS:-true}" --max-lead "${MAX_LEAD:-0}" \
    > "$out/paired.$world.txt" 2>&1 || { log "W=$world failed: see $out/paired.$world.txt"; tail -n 5 "$out/paired.$world.txt" >&2; status=1; }
  if ! grep -q '^CHECK ' "$out/paired.$world.txt" || grep '^CHECK ' "$out/paired.$world.txt" | grep -qv 'mismatches=0'; then
    log "W=$world: the twin's or jnccl's all-reduce check failed or did not run"; status=1
  fi
done

# One row per (W, case): the rank with the highest median ratio (the slowest rank's view).
{
  echo "paired host cost, jnccl against its raw twin on the same communicators ($backend; $count x FP32;"
  echo "mode ${MODE:-BLOCKING_SPLIT}; ${BLOCKS:-20} x ${CALLS:-1000} calls per side, alternating; NCCL: $(grep -ho 'NCCL [0-9][0-9.]*' "$out"/paired.*.txt 2>/dev/null | sort -u | tr '\n' ' ')"
  grep -h '^PAIRED ' "$out"/paired.*.txt 2>/dev/null | awk '
    {
      delete f
      for (i = 2; i <= NF; i++) { split($i, p, "="); f[p[1]] = p[2] }
      k = f["world"] SUBSEP f["case"]
      if (!(k in best) || f["ratio_median"] + 0 > ratio[k] + 0) {
        best[k] = sprintf("%3s  %-20s %9s %9s %7s  %6s-%-6s  %6s-%-6s %7s", f["world"], f["case"], f["jnccl_us"], f["raw_us"],
          f["ratio_median"], f["ratio_q1"], f["ratio_q3"], f["ratio_min"], f["ratio_max"], f["host_ratio_median"])
        ratio[k] = f["ratio_median"]
        if (!(k in seen)) { order[n++] = k; seen[k] = 1 }
      }
    }
    END {
      printf "%3s  %-20s %9s %9s %7s  %-13s  %-13s %7s\n", "W", "case", "jnccl us", "raw us", "ratio", "IQR", "min-max", "r.host"
      for (i = 0; i < n; i++) print best[order[i]]
      print ""
      print "ratio = median over the blocks of jnccl us / raw us (all included), with its IQR and range;"
      print "r.host = the same without the synchronizations (at W >= 2 it holds jnccl'"'"'s throttle, see MAX_LEAD)."
    }'
} | tee "$out/summary.txt"
log "logs in $out"
exit $status
