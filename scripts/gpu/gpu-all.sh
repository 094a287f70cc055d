#!/usr/bin/env bash
# Every GPU check of jnccl in one go on the one-GPU machine (after scripts/stage-gpu.sh, .gpu
# carried): the correctness suites side by side (they need the GPU's memory and spare cores, not its
# speed), then the measurements one after another. Each part runs under its own time limit so that a
# hung part cannot take the rest with it; a line per part (name, exit code, seconds since the start)
# goes to stdout and summary.txt. Everything lands in $OUT/gpu-all.tgz plus $OUT/summary.txt (few
# files: a device call brings back at most 8).
#
#   scripts/gpu/gpu-all.sh
#
# Parts: gpu-test.sh (gpu-tagged and world-1 conformance tests, NCCL 2.28), gpu-test.sh
# --threads-multi-rank (threads suite at worlds 2-8 on NCCL 2.30), gpu-mpi-test.sh (MPI mode, one
# process per rank), then gpu-bench-mpi.sh (jnccl vs nccl-tests at $BENCH_WORLDS, default 2; only when
# $NCCL_TESTS names nccl-tests' build folder or .gpu/nccl-tests.tar.xz is there), gpu-hostcost-threads.sh,
# gpu-hostcost-paired.sh (at world 1 and $HOSTCOST_WORLDS; PAIRED_BLOCKS, default 10, PAIRED_WARMUP_MS, 500,
# PAIRED_LIMIT, 120 s), gpu-torch-hostcost.sh and
# gpu-hostcost-multi.sh at $HOSTCOST_WORLDS (default 2), and bin/bench at world 1 for the operations
# that need no second rank. SKIP="name ..." leaves parts out (names as in the summary: mpi gpu-test
# multi-rank bench-mpi hostcost-threads paired torch hostcost-multi-wW bench1-OP nccl-tests1-all_gather).
# Limits and sizes: MPI_LIMIT, GPU_TEST_LIMIT, MULTI_LIMIT, JNCCL_MULTI_RANK_TESTS, BENCH_LIMIT,
# BENCH_ITERS, BENCH_OPS, HOSTCOST_ITERS, HOSTCOST_THREADS_ITERS, HOSTCOST_WARMUP (process mode),
# HOSTCOST_LIMIT, HOSTCOST_MULTI_LIMIT (per W), BENCH1_OPS,
# BENCH1_LIMIT.
set -uo pipefail
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
out=${OUT:-/tmp/jnccl-gpu-all}
r=$(mktemp -d /tmp/jnccl-gpu-all.XXXXXX)
mkdir -p "$out"
start=$(date +%s)
part() { # name, limit in seconds, command...: runs it with its log in $r/name.log (unless $SKIP names it)
  local name=$1 limit=$2 rc
  shift 2
  case " ${SKIP:-} " in *" $name "*) echo "$name skipped (SKIP)" | tee -a "$r/summary.txt"; return 0 ;; esac
  OUT=$r/$name timeout "$limit" "$@" > "$r/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc t=$(( $(date +%s) - start ))s" | tee -a "$r/summary.txt"
  grep -hE "tests (successful|failed)|ALL PASSED|FAILED|^PASS|^FAIL" "$r/$name.log" | sed "s/^/  $name: /" | tee -a "$r/summary.txt"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$r/summary.txt"
. scripts/gpu/lib/gpu-bundle.sh
gpu_bundle >/dev/null || exit 1
# nccl-tests: $NCCL_TESTS, else .gpu/nccl-tests.tar.xz unpacked (the comparisons are left out without either).
NCCL_TESTS=$(nccl_tests_dir 2>/dev/null) && export NCCL_TESTS || unset NCCL_TESTS

# Correctness, side by side.
part mpi "${MPI_LIMIT:-240}" scripts/gpu/gpu-mpi-test.sh &
part gpu-test "${GPU_TEST_LIMIT:-240}" scripts/gpu/gpu-test.sh &
JNCCL_MULTI_RANK_TESTS=${JNCCL_MULTI_RANK_TESTS:-ThreadsCollectivesTest ThreadsOpsTest ThreadsStuckCollectiveTest ThreadsSplitFailureTest ThreadsReductionArithmeticTest} \
  part multi-rank "${MULTI_LIMIT:-260}" scripts/gpu/gpu-test.sh --threads-multi-rank
wait

# Measurements, one at a time.
if [ -n "${NCCL_TESTS:-}" ]; then
  ITERS=${BENCH_ITERS:-10} WARMUP=2 part bench-mpi "${BENCH_LIMIT:-120}" scripts/gpu/gpu-bench-mpi.sh -w "${BENCH_WORLDS:-2}" \
    -o "${BENCH_OPS:-all_reduce reduce_scatter all_gather alltoall}"
fi
worlds=${HOSTCOST_WORLDS:-2}
# shellcheck disable=SC2086 # the worlds are separate arguments
ITERS=${HOSTCOST_THREADS_ITERS:-${HOSTCOST_ITERS:-2000}} part hostcost-threads "${HOSTCOST_LIMIT:-60}" scripts/gpu/gpu-hostcost-threads.sh $worlds
# shellcheck disable=SC2086
BLOCKS=${PAIRED_BLOCKS:-10} WARMUP_MS=${PAIRED_WARMUP_MS:-500} part paired "${PAIRED_LIMIT:-120}" \
  scripts/gpu/gpu-hostcost-paired.sh 1 $worlds
# shellcheck disable=SC2086
ITERS=${HOSTCOST_ITERS:-2000} part torch "${HOSTCOST_LIMIT:-60}" scripts/gpu/gpu-torch-hostcost.sh $worlds
for w in $worlds; do
  ITERS=${HOSTCOST_ITERS:-2000} WARMUP=${HOSTCOST_WARMUP:-600} TIMEOUT=$(( ${HOSTCOST_MULTI_LIMIT:-75} - 10 )) \
    part "hostcost-multi-w$w" "${HOSTCOST_MULTI_LIMIT:-75}" scripts/gpu/gpu-hostcost-multi.sh "$w"
done
for op in ${BENCH1_OPS:-alltoall broadcast sendrecv}; do
  part "bench1-$op" "${BENCH1_LIMIT:-15}" /tmp/jnccl-bundle/bin/bench "$op" -b 8 -e 256M -f 16 -g 1 -w 2 -n 10
done
if [ -n "${NCCL_TESTS:-}" ]; then
  part nccl-tests1-all_gather "${BENCH1_LIMIT:-15}" "$NCCL_TESTS/all_gather_perf" -b 1M -e 1G -f 4 -g 1 -w 2 -n 10
fi
tar czf "$out/gpu-all.tgz" -C "$r" .
cp "$r/summary.txt" "$out/summary.txt"
