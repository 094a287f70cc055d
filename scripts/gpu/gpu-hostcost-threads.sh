#!/usr/bin/env bash
# Host cost of a transaction in threads mode: W ranks as threads of ONE process, all on
# device 0, from C (examples/src/main/c/transaction_overhead.c --threads W: blocking, non-blocking and
# split-child communicators) and through jnccl (dev.jnccl.examples.bench.ThreadsHostCost:
# ThreadsCommunicators with ThreadsOptions.withDevices(0,...,0), CommunicatorMode BLOCKING_SPLIT and
# NON_BLOCKING), one W after the other. Prints one table: W, mode, the C communicator it is compared
# with, C us/txn, jnccl us/txn (each: the slowest rank's best repetition, all included, and host only),
# and jnccl / C.
#
#   scripts/gpu/gpu-hostcost-threads.sh W... [--host]          e.g. scripts/gpu/gpu-hostcost-threads.sh 2 4
#
# GPU machine (default; no JDK or Maven): needs .gpu/jnccl-bundle.tar.xz (scripts/stage-gpu.sh: its JMH
#   jar and Java runtime), nvcc, nccl.h and libnccl.so where nvcc finds them (to build), and NCCL 2.30+
#   to run: .gpu/libnccl.so.2.xz (scripts/stage-gpu.sh copies ../shared/nccl-2.30.7-sm90/libnccl.so.2.xz)
#   or JNCCL_MULTI_RANK_NCCL=/path/libnccl.so.2. NCCL 2.28 refuses several ranks of one process on one GPU.
#   Both programs run with NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_NVLS_ENABLE=0; the C program loads that
#   library through LD_LIBRARY_PATH, jnccl through -Djnccl.nccl.library; the script checks that both
#   report NCCL >= 2.30.
# --host (or no nvcc): jnccl's host emulation (it follows NCCL_MULTI_RANK_GPU_ENABLE too); the C program
#   is built with gcc against the libjnccl_host.so inside the benchmark jar. Its figures say nothing
#   about NCCL or a GPU: on the emulation streams are host threads that compete with the ranks' threads.
# Environment: ITERS (default 20000), REPS (3), WARMUP (2000), WARMUP_MS (jnccl only: its warm-up of each
#   case also lasts at least this long on every rank; default 2000, 0: by count only), COUNT (1024, divisible by every W),
#   CASES (default transaction; a comma list of gpu-hostcost-multi.sh's cases, or all: the transaction and
#   every convenience operation), OUT (logs; default a new
#   /tmp/jnccl-hostcost-threads.XXXXXX), TIMEOUT per program run (default 900 s), JAVA_OPTS (extra JVM
#   flags), PIN_CPUS (jnccl's CPU pinning, default true as jnccl's default), MAX_LEAD (jnccl's
#   ThreadsOptions.maxLead, default 0 = jnccl's default of 8: a rank more than that many transactions
#   ahead of the slowest waits on the host, inside its timed loop; the C threads have no such throttle,
#   so MAX_LEAD=65536, its largest, shows jnccl's cost without it), C_MODES (the C program's -m, a comma
#   list: all (default), blocking, nonblocking, split, both, and splitnoshare: the split with splitShare = 0,
#   a candidate for jnccl's default, not in all), JAVA_MODES (ThreadsHostCost --mode: both
#   (default), BLOCKING_SPLIT or NON_BLOCKING; C_MODES=blocking,split JAVA_MODES=BLOCKING_SPLIT: jnccl's
#   default mode against its two C baselines in about a third of the time).
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
if ! { command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; }; then mode=host; fi
iters=${ITERS:-20000}
reps=${REPS:-3}
warmup=${WARMUP:-2000}
count=${COUNT:-1024}
. "$root/scripts/gpu/lib/hostcost.sh"
cases=${CASES:-transaction}
[ "$cases" = all ] && cases=$hostcost_all_cases
limit=${TIMEOUT:-900}
pin=${PIN_CPUS:-true}
log() { echo "gpu-hostcost-threads.sh: $*" >&2; }

if [ -n "${OUT:-}" ]; then out=$OUT; mkdir -p "$out"; else out=$(mktemp -d /tmp/jnccl-hostcost-threads.XXXXXX); fi
work=$(mktemp -d /tmp/jnccl-hostcost-build.XXXXXX)
trap 'rm -rf "$work"' EXIT

# ---------------------------------------------------------------- jar, java and the C program
hostcost_prepare

# ---------------------------------------------------------------- NCCL 2.30 (GPU)
java_nccl=()
if [ "$mode" = gpu ]; then
  . "$root/scripts/gpu/lib/gpu-bundle.sh"
  nccl=$(multi_rank_nccl) || exit 2
  java_nccl=(-Djnccl.nccl.library="$nccl")
  export LD_LIBRARY_PATH=$(dirname "$nccl")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  log "NCCL for several ranks per GPU: $nccl"
fi
export NCCL_MULTI_RANK_GPU_ENABLE=1 NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

# ---------------------------------------------------------------- runs
status=0
for world in "${worlds[@]}"; do
  if [ $((count % world)) != 0 ]; then log "COUNT $count is not divisible by W=$world"; exit 2; fi
  log "C, W=$world threads ($backend): -m ${C_MODES:-all} -n $iters -r $reps -w $warmup -c $count --cases $cases"
  timeout "$limit" "$c_bin" --threads "$world" -m "${C_MODES:-all}" -n "$iters" -r "$reps" -w "$warmup" -c "$count" \
    --cases "$cases" > "$out/c.$world.txt" 2>&1 || { log "C at W=$world failed: see $out/c.$world.txt"; tail -n 5 "$out/c.$world.txt" >&2; status=1; }
  log "jnccl, W=$world threads ($backend): mode ${JAVA_MODES:-both}"
  # shellcheck disable=SC2086
  timeout "$limit" "$java_bin" --enable-native-access=ALL-UNNAMED -Djnccl.backend=$backend "${java_nccl[@]}" \
    ${JAVA_OPTS:-} -cp "$jar" dev.jnccl.examples.bench.ThreadsHostCost --world "$world" --mode "${JAVA_MODES:-both}" \
    --iters "$iters" --reps "$reps" --warmup "$warmup" --warmup-ms "${WARMUP_MS:-2000}" --count "$count" --cases "$cases" --pin-cpus "$pin" --max-lead "${MAX_LEAD:-0}" \
    > "$out/jnccl.$world.txt" 2>&1 || { log "jnccl at W=$world failed: see $out/jnccl.$world.txt"; tail -n 5 "$out/jnccl.$world.txt" >&2; status=1; }
  if [ "$mode" = gpu ]; then
    # The version each program loaded: NCCL 2.28 would have refused, but say so plainly if it ran.
    c_version=$(grep -o 'NCCL [0-9]*' "$out/c.$world.txt" | head -n 1 | cut -d' ' -f2)
    j_version=$(grep -o 'NCCL [0-9][0-9.]*' "$out/jnccl.$world.txt" | head -n 1 | cut -d' ' -f2)
    log "W=$world: C loaded NCCL ${c_version:-?}, jnccl NCCL ${j_version:-?}"
    if [ "${c_version:-0}" -lt 23000 ] 2>/dev/null || [[ ! "${j_version:-}" =~ ^2\.(3[0-9]|[4-9][0-9]) ]]; then
      log "W=$world: expected NCCL >= 2.30 in both programs"; status=1
    fi
  fi
done

# ---------------------------------------------------------------- summary
{
  echo "threads-mode host cost per operation: W ranks as threads of one process on device 0 ($backend;"
  echo "$count x FP32; comms stream synchronized every 256 ops; best of $reps x $iters per rank, the slowest"
  echo "rank's figure; us = all included, host = without the synchronizations; jnccl ThreadsOptions"
  echo "maxLead $([ "${MAX_LEAD:-0}" = 0 ] && echo "8 (default)" || echo "$MAX_LEAD"), pinCpus $pin; NCCL: $(grep -ho 'NCCL [0-9][0-9.]*' "$out"/jnccl.*.txt 2>/dev/null | sort -u | tr '\n' ' ')"
  hostcost_slowest "$out"/c.*.txt "$out"/jnccl.*.txt | awk -v cases="$cases" "$hostcost_awk_best"'
    END {
      nc = split(cases, cl, ",")
      jm[1] = "BLOCKING_SPLIT"; cm[1] = "split"
      jm[2] = "NON_BLOCKING";   cm[2] = "nonblocking"
      jm[3] = "-";              cm[3] = "blocking"
      jm[4] = "-";              cm[4] = "splitnoshare"
      fmt = "%3s  %-27s %-15s %-12s %9s %9s %10s %10s %7s %7s\n"
      printf fmt, "W", "case", "mode", "C comm", "C us", "C host", "jnccl us", "jnccl host", "ratio", "r.host"
      for (i = 0; i < nw; i++) for (c = 1; c <= nc; c++) for (m = 1; m <= 4; m++) {
        w = worlds[i]
        ck = w SUBSEP cl[c] SUBSEP "C" SUBSEP cm[m]
        jk = w SUBSEP cl[c] SUBSEP "jnccl" SUBSEP jm[m]
        cu = cell(ck, best); ch = cell(ck, hbest); ju = cell(jk, best); jh = cell(jk, hbest)
        if (cu == "-" && ju == "-") continue # a mode C_MODES / JAVA_MODES left out
        printf fmt, w, cl[c], jm[m] == "-" ? "(C only)" : jm[m], cm[m], cu, ch, ju, jh, ratio(ju, cu), ratio(jh, ch)
      }
      print ""
      print "C comm: the C program'"'"'s communicator for that jnccl mode: split = a non-blocking parent split into a"
      print "  blocking child (what BLOCKING_SPLIT does); blocking = NCCL'"'"'s default, no jnccl twin. ratio = jnccl / C."
      print "  splitnoshare (C_MODES=...,splitnoshare) = that split with splitShare = 0 (a candidate, no jnccl twin yet)."
      print "host leaves out the every-256 synchronization: when far below us, the device set the pace."
    }'
} | tee "$out/summary.txt"
log "logs in $out"
exit $status
