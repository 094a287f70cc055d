#!/usr/bin/env bash
# Host cost of a transaction and of jnccl's convenience collectives at world size W, one process
# per rank on device 0, from C (examples/src/main/c/transaction_overhead.c: blocking,
# non-blocking and split-child communicators) and through jnccl
# (dev.jnccl.examples.bench.MultiRankHostCost: CommunicatorMode BLOCKING_SPLIT and NON_BLOCKING).
# Ranks meet through a unique-id file; on the GPU each process gets NCCL_HOSTID=r<rank> (NCCL then
# lets W ranks share one GPU, see README "Testing"), NCCL_SOCKET_IFNAME=lo, NCCL_NVLS_ENABLE=0.
# Prints one summary table: case, impl, mode, W, median us/op (slowest rank), host-only us/op.
#
#   scripts/gpu/gpu-hostcost-multi.sh W [--host]
#
# GPU machine (default; no JDK or Maven): needs .gpu/jnccl-bundle.tar.xz (scripts/stage-gpu.sh: its
#   JMH jar and Java runtime), nvcc, nccl.h and libnccl.so where nvcc finds them.
# --host (or no nvcc): jnccl's host emulation; the C program is built with gcc against the
#   libjnccl_host.so inside the benchmark jar and the emulation's own ABI header (no NVIDIA headers).
# Environment: ITERS (default 20000), REPS (3), WARMUP (2000), WARMUP_MS (jnccl only: its warm-up of each
#   case also lasts at least this long on every rank; default 2000, 0: by count only), COUNT (1024, divisible by W),
#   OUT (logs; default a new /tmp/jnccl-hostcost.XXXXXX), TIMEOUT per program run (default 900 s),
#   SKIP_C=1 (jnccl only), JAVA_CASES (MultiRankHostCost --cases; default
#   transaction,all_reduce_ordered,reduce_scatter; scripts/gpu/gpu-torch-hostcost.sh runs the last two),
#   C_CASES (the C program's --cases; default transaction,all_reduce_ordered), CASES (the default of
#   both lists; CASES=all: the transaction and every convenience operation, each case named alike in
#   C and jnccl: transaction, all_reduce_ordered, reduce_scatter_ordered, broadcast_ordered,
#   all_to_all_ordered, reduce_mean_ordered, reduce_max_ordered, reduce_norm_squared_ordered; the
#   table pairs C and jnccl by case name), C_MODES (the C program's -m, a comma list of: all (default),
#   blocking, nonblocking, split, both, splitnoshare: the split with splitShare = 0, not in all), JAVA_MODES (MultiRankHostCost --mode: both (default),
#   BLOCKING_SPLIT or NON_BLOCKING; C_MODES=blocking JAVA_MODES=BLOCKING_SPLIT: jnccl's default mode
#   against its C baseline in 2/5 of the time), JAVA_OPTS (JVM flags;
#   default -XX:CompileThresholdScaling=0.05: W processes time-slice the one GPU, so an operation takes
#   milliseconds and the JIT's usual 10-15k calls before C2 would need minutes of warm-up; the scaling
#   lets a warm-up of WARMUP operations reach C2 code, which is what a long training run executes).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

world=${1:-}
[[ "$world" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 W [--host]" >&2; exit 2; }
shift
mode=gpu
if [ "${1:-}" = "--host" ] || ! { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }; then
  mode=host
fi
iters=${ITERS:-20000}
reps=${REPS:-3}
warmup=${WARMUP:-2000}
count=${COUNT:-1024}
limit=${TIMEOUT:-900}
. "$root/scripts/gpu/lib/hostcost.sh"
cases=${CASES:-}
[ "$cases" = all ] && cases=$hostcost_all_cases
java_cases=${JAVA_CASES:-${cases:-transaction,all_reduce_ordered,reduce_scatter}}
c_cases=${C_CASES:-${cases:-transaction,all_reduce_ordered}}
log() { echo "gpu-hostcost-multi.sh: $*" >&2; }

if [ -n "${OUT:-}" ]; then out=$OUT; mkdir -p "$out"; else out=$(mktemp -d /tmp/jnccl-hostcost.XXXXXX); fi
work=$(mktemp -d /tmp/jnccl-hostcost-build.XXXXXX)
trap 'rm -rf "$work"' EXIT

# ---------------------------------------------------------------- jar, java and the C program
hostcost_prepare

# ---------------------------------------------------------------- runs
# Runs "$@" once per rank (the rank number replaces RANK in the arguments), each with its own
# NCCL_HOSTID; waits for all; fails if any rank failed. Output: $out/<name>.<rank>.txt
launch() {
  local name=$1; shift
  local pids=() status=0
  for ((rank = 0; rank < world; rank++)); do
    local args=("${@//RANK/$rank}")
    NCCL_HOSTID=r$rank NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0 timeout "$limit" "${args[@]}" \
      > "$out/$name.$rank.txt" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  if [ $status != 0 ]; then
    log "$name: a rank failed (or ran past ${limit} s); see $out/$name.*.txt"
    tail -n 5 "$out/$name".*.txt >&2 || true
  fi
  return $status
}

status=0
if [ "${SKIP_C:-0}" != 1 ]; then
  log "C, W=$world ($backend): -m ${C_MODES:-all} -n $iters -r $reps -w $warmup -c $count --cases $c_cases"
  launch c "$c_bin" --world "$world" --rank RANK --id-file "$work/c-id" -m "${C_MODES:-all}" -n "$iters" -r "$reps" -w "$warmup" \
    -c "$count" --cases "$c_cases" || status=1
fi
log "jnccl, W=$world ($backend): mode ${JAVA_MODES:-both}, cases $java_cases"
# shellcheck disable=SC2086 # JAVA_OPTS: one word per flag
launch jnccl "$java_bin" ${JAVA_OPTS:--XX:CompileThresholdScaling=0.05} --enable-native-access=ALL-UNNAMED -Djnccl.backend=$backend -cp "$jar" \
  dev.jnccl.examples.bench.MultiRankHostCost --world "$world" --rank RANK --id-file "$work/j-id" --mode "${JAVA_MODES:-both}" \
  --iters "$iters" --reps "$reps" --warmup "$warmup" --warmup-ms "${WARMUP_MS:-2000}" --count "$count" --cases "$java_cases" || status=1

# ---------------------------------------------------------------- summary
{
  echo "host cost per operation at W=$world, one process per rank on device 0 ($backend; $count x FP32;"
  echo "comms stream synchronized every 256 ops; median of $reps x $iters; the slowest rank's figure)"
  hostcost_slowest "$out"/c.*.txt "$out"/jnccl.*.txt | awk '
    # host cost against the C communicator of that mode: the device sets median_us when W processes
    # time-slice one GPU, so only the host figures compare the callers
    function ratio(c, mode, k,   base) {
      base = hst[c SUBSEP "C" SUBSEP mode]
      return (base != "" && base + 0 > 0) ? sprintf("%.2f", hst[order[k]] / base) : "-"
    }
    {  # W case impl mode median host_median best host_best
      key = $2 SUBSEP $3 SUBSEP $4; w = $1; med[key] = $5; hst[key] = $6; order[n++] = key
      if (!($2 in seenc)) { seenc[$2] = 1; cases[nc++] = $2 }
    }
    END {  # grouped by case (C rows, then jnccl rows), cases in order of first appearance
      fmt = "%-27s %-6s %-15s %3s %10s %10s %14s %11s\n"
      printf fmt, "case", "impl", "mode", "W", "median_us", "host_us", "host/C blocking", "host/C split"
      for (c = 0; c < nc; c++) {
        for (k = 0; k < n; k++) {
          split(order[k], f, SUBSEP)
          if (f[1] != cases[c]) continue
          printf fmt, f[1], f[2], f[3], w, med[order[k]], hst[order[k]], ratio(f[1], "blocking", k), ratio(f[1], "split", k)
        }
      }
      print ""
      print "C modes: blocking / nonblocking communicator; split = non-blocking parent split into a blocking child"
      print "  (what jnccl BLOCKING_SPLIT does). jnccl reduce_scatter = comm.reduceScatter(t, stream) (no C twin;"
      print "  the same call as reduce_scatter_ordered). Each *_ordered case: the convenience operation in jnccl,"
      print "  its native calls in C (transaction_overhead.c says which); host/C blocking: jnccl / C blocking."
      print "host_us leaves out the every-256 synchronization: when far below median_us, the device set the pace."
    }'
} | tee "$out/summary.txt"
log "logs in $out"
exit $status
