#!/usr/bin/env bash
# jnccl's benchmark against NVIDIA's nccl-tests, one process per rank under Open MPI's mpirun,
# right after each other, same ops, sizes and transport. On the one-GPU machine every
# rank uses device 0 and gets its own NCCL_HOSTID (NCCL then talks through its socket transport:
# the absolute figures are a socket's, the ratio is what this measures). Prints, per op, W and
# size, the out-of-place busbw of both (the in-place one where a column is empty) and
# jnccl / nccl-tests; both full tables stay in the logs.
#
#   [NCCL_TESTS=DIR] [REGISTER=1] scripts/gpu/gpu-bench-mpi.sh [-w "2 4"] [-o "all_reduce ..."] [-b 16M] [-e 256M] [-f 4]
#
# ITERS / WARMUP (default 20 / 5) go to both as -n / -w; MODE (blocking_split, the default, or
# non_blocking) is jnccl's --mode. REGISTER (0, the default, or 1) goes to both as -R: 1 registers
# the send and receive buffers (ncclMemAlloc'd by both) with each rank's communicator
# (ncclCommRegister); logs and summary lines then carry R1 (op-R1). DIR holds nccl-tests' *_perf programs
# built with MPI=1 (NVIDIA's public source, never committed here); without NCCL_TESTS the script
# unpacks .gpu/nccl-tests.tar.xz (scripts/gpu/build-nccl-tests.sh builds it on a machine with nvcc).
# jnccl runs from the bundle (.gpu/jnccl-bundle.tar.xz, scripts/stage-gpu.sh). Logs go to $OUT
# (default /tmp/jnccl-bench-mpi).
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/lib/gpu-bundle.sh
bundle=$(gpu_bundle) || exit 1
worlds="2 4" ops="all_reduce reduce_scatter all_gather alltoall sendrecv broadcast" min=16M max=256M factor=4
while getopts "w:o:b:e:f:" opt; do
  case $opt in
    w) worlds=$OPTARG ;; o) ops=$OPTARG ;; b) min=$OPTARG ;; e) max=$OPTARG ;; f) factor=$OPTARG ;;
    *) echo "usage: NCCL_TESTS=DIR $0 [-w worlds] [-o ops] [-b min] [-e max] [-f factor]" >&2; exit 2 ;;
  esac
done
NCCL_TESTS=$(nccl_tests_dir) && [ -d "$NCCL_TESTS" ] || { echo "gpu-bench-mpi.sh: set NCCL_TESTS to nccl-tests' build folder" >&2; exit 2; }
register=${REGISTER:-0}
case $register in 0|1) ;; *) echo "gpu-bench-mpi.sh: REGISTER=$register: expected 0 or 1 (-R 2, symmetric windows, is not in jnccl)" >&2; exit 2 ;; esac
tag=w suffix=
if [ "$register" = 1 ]; then tag=R1-w suffix=-R1; fi
# nccl-tests links libcudart.so.13 dynamically: the toolkit's folder, where the loader does not look already.
if [ -d /usr/local/cuda/lib64 ]; then
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
out=${OUT:-/tmp/jnccl-bench-mpi}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}
# One NCCL_HOSTID per process (several ranks on one GPU), device 0 for all (jnccl: JNCCL_DEVICE;
# nccl-tests: NCCL_TESTS_DEVICE, without which it refuses a second local rank on a one-GPU machine).
per_rank='NCCL_HOSTID=r$OMPI_COMM_WORLD_RANK exec "$@"'
launch() { # W, program and arguments
  local w=$1; shift
  timeout "${TIMEOUT:-300}" mpirun --allow-run-as-root --oversubscribe -np "$w" --bind-to none \
    -x NCCL_NVLS_ENABLE -x NCCL_SOCKET_IFNAME ${LD_LIBRARY_PATH:+-x LD_LIBRARY_PATH} -x JNCCL_DEVICE=0 -x NCCL_TESTS_DEVICE=0 -x JNCCL_BACKEND=cuda \
    sh -c "$per_rank" rank "$@"
}
# size -> out-of-place busbw (field 8) and in-place busbw (field 12) from nccl-tests' table.
busbw() { awk '/^ *[0-9]+ +[0-9]+ /{print $1, $8, $12}' "$1"; }

summary=$out/summary.txt
printf "%-15s %2s %10s %12s %12s %8s\n" op W bytes "jnccl GB/s" "nccl-tests" ratio | tee "$summary"
for w in $worlds; do
  for op in $ops; do
    # -a 3 for both: the slowest rank's time (jnccl's default; nccl-tests' default is the mean over
    # ranks, which at W = 4 on one time-sliced GPU reads faster than the slowest rank).
    timing=(-n "${ITERS:-20}" -w "${WARMUP:-5}" -a 3 -R "$register")
    launch "$w" "$NCCL_TESTS/${op}_perf" -b "$min" -e "$max" -f "$factor" "${timing[@]}" -g 1 -c 1 > "$out/nccl-tests-$op-$tag$w.txt" 2>&1 \
      || echo "gpu-bench-mpi.sh: nccl-tests $op W=$w failed (see $out/nccl-tests-$op-$tag$w.txt)" >&2
    launch "$w" "$bundle/bin/bench" "$op" --launcher mpi --mode "${MODE:-blocking_split}" -b "$min" -e "$max" -f "$factor" "${timing[@]}" -c 1 > "$out/jnccl-$op-$tag$w.txt" 2>"$out/jnccl-$op-$tag$w.err" \
      || echo "gpu-bench-mpi.sh: jnccl $op W=$w failed (see $out/jnccl-$op-$tag$w.err)" >&2
    # broadcast and alltoall: jnccl's columns follow nccl-tests'; take the out-of-place busbw where
    # both have it, else the in-place one.
    join <(busbw "$out/jnccl-$op-$tag$w.txt" | sort -k1,1) <(busbw "$out/nccl-tests-$op-$tag$w.txt" | sort -k1,1) | sort -n \
      | awk -v op="$op$suffix" -v w="$w" '{ j = ($2 ~ /^[0-9.]+$/) ? $2 : $3; n = ($4 ~ /^[0-9.]+$/) ? $4 : $5;
          printf "%-15s %2d %10d %12s %12s %8s\n", op, w, $1, j, n, (n > 0) ? sprintf("%.3f", j / n) : "n/a" }' \
      | tee -a "$summary"
  done
done
