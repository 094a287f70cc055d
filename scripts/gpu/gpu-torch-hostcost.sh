#!/usr/bin/env bash
# Host cost per call of torch.distributed (NCCL backend) beside jnccl's convenience collectives, W
# processes on the one GPU: for each W, scripts/gpu/lib/torch_hostcost.py as W processes
# (dist.all_reduce(t) and dist.reduce_scatter_tensor(out, t) on 1024 FP32, async_op=False), then
# scripts/gpu/gpu-hostcost-multi.sh W with only jnccl's comm.allReduce(t, SUM, stream) ("all_reduce_ordered")
# and comm.reduceScatter(t, stream) ("reduce_scatter"), both CommunicatorModes. Every process is one rank
# on device 0 with its own NCCL_HOSTID=r<rank>, NCCL_SOCKET_IFNAME=lo, NCCL_NVLS_ENABLE=0; torch's ranks
# meet through a TCP store on 127.0.0.1 (no network needed). Prints one table: W, op, torch us/call,
# jnccl mode, jnccl us/call (each: the slowest rank's best repetition, all included and host only), and
# jnccl / torch.
#
#   scripts/gpu/gpu-torch-hostcost.sh W... [--host]            e.g. scripts/gpu/gpu-torch-hostcost.sh 2 4
#
# GPU machine (default): PyTorch with CUDA in python3 ($PYTHON), and for jnccl what
#   scripts/gpu/gpu-hostcost-multi.sh needs (.gpu/jnccl-bundle.tar.xz from scripts/stage-gpu.sh; it uses the
#   machine's libnccl, torch uses the NCCL it ships with: the table header names both versions).
# --host: no torch (jnccl on its host emulation only, to try the script; those figures mean nothing).
# Environment: ITERS (default 2000), REPS (3), WARMUP (500), COUNT (1024, divisible by every W),
#   LAUNCHER (auto: mpirun when there is one, falling back to plain subprocesses if it fails; mpirun;
#   spawn), MPIRUN_ARGS (extra mpirun flags), PYTHON (python3), OUT (logs; default a new
#   /tmp/jnccl-torch-hostcost.XXXXXX), TIMEOUT per run (default 900 s).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

worlds=()
host=""
for arg in "$@"; do
  case "$arg" in
    --host) host=--host ;;
    *) [[ "$arg" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 W... [--host]" >&2; exit 2; }; worlds+=("$arg") ;;
  esac
done
[ ${#worlds[@]} -gt 0 ] || { echo "usage: $0 W... [--host]" >&2; exit 2; }
iters=${ITERS:-2000}
reps=${REPS:-3}
warmup=${WARMUP:-500}
count=${COUNT:-1024}
limit=${TIMEOUT:-900}
python=${PYTHON:-python3}
launcher=${LAUNCHER:-auto}
log() { echo "gpu-torch-hostcost.sh: $*" >&2; }
. "$root/scripts/gpu/lib/hostcost.sh"    # hostcost_slowest
if [ -n "${OUT:-}" ]; then out=$OUT; mkdir -p "$out"; else out=$(mktemp -d /tmp/jnccl-torch-hostcost.XXXXXX); fi

torch_ok=0
if [ -z "$host" ]; then
  if "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    torch_ok=1
  else
    log "$python cannot import torch with CUDA: torch rows will be empty"
  fi
fi
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# torch at world $1: its RESULT lines in $out/torch-$1/torch.<rank>.txt
run_torch() {
  local world=$1 dir=$out/torch-$1
  local args=("$root/scripts/gpu/lib/torch_hostcost.py" --out-dir "$dir" --count "$count" --iters "$iters" --reps "$reps"
              --warmup "$warmup" --timeout "$limit")
  rm -rf "$dir"
  if [ "$launcher" != spawn ] && command -v mpirun >/dev/null; then
    log "torch, W=$world: mpirun -np $world"
    # shellcheck disable=SC2086
    if MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) timeout "$limit" mpirun --allow-run-as-root --oversubscribe \
        --bind-to none -np "$world" -x MASTER_ADDR -x MASTER_PORT -x NCCL_SOCKET_IFNAME -x NCCL_NVLS_ENABLE \
        -x LD_LIBRARY_PATH -x PATH ${MPIRUN_ARGS:-} "$python" "${args[@]}" > "$out/torch-$world.log" 2>&1; then
      return 0
    fi
    log "torch, W=$world: mpirun failed (see $out/torch-$world.log)"
    tail -n 5 "$out/torch-$world.log" >&2 || true
    [ "$launcher" = mpirun ] && return 1
    rm -rf "$dir"
  fi
  log "torch, W=$world: $world subprocesses (torch_hostcost.py --spawn)"
  MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) "$python" "${args[@]}" --spawn "$world" \
    > "$out/torch-$world.spawn.log" 2>&1 || { log "torch, W=$world failed: see $out/torch-$world.spawn.log";
                                             tail -n 5 "$out/torch-$world.spawn.log" >&2; return 1; }
}

status=0
for world in "${worlds[@]}"; do
  if [ "$torch_ok" = 1 ]; then run_torch "$world" || status=1; fi
  log "jnccl, W=$world: scripts/gpu/gpu-hostcost-multi.sh $world $host (convenience operations only)"
  SKIP_C=1 JAVA_CASES=all_reduce_ordered,reduce_scatter ITERS=$iters REPS=$reps WARMUP=$warmup COUNT=$count \
    TIMEOUT=$limit OUT=$out/jnccl-$world scripts/gpu/gpu-hostcost-multi.sh "$world" $host > "$out/jnccl-$world.log" 2>&1 \
    || { log "jnccl, W=$world failed: see $out/jnccl-$world.log"; tail -n 5 "$out/jnccl-$world.log" >&2; status=1; }
done

# ---------------------------------------------------------------- summary
{
  echo "host cost per call, W processes on device 0 ($count x FP32; synchronized every 256 calls; best of"
  echo "$reps x $iters per rank, the slowest rank's figure; us = all included, host = without the synchronizations)"
  torch_line=$(cat "$out"/torch-*/torch.0.txt 2>/dev/null | grep -m1 '^# torch' | sed 's/^# //; s/, rank 0 of.*//' || true)
  jnccl_line=$(cat "$out"/jnccl-*/jnccl.0.txt 2>/dev/null | grep -m1 '^# jnccl' | sed 's/^.*backend/backend/; s/, mode.*//' || true)
  echo "torch: ${torch_line:-not run (--host, or no torch with CUDA here)}"
  echo "jnccl: ${jnccl_line:-no result}"
  hostcost_slowest "$out"/torch-*/torch.*.txt "$out"/jnccl-*/jnccl.*.txt | awk "$hostcost_awk_best"'
    END {
      op[1] = "all_reduce";     jc[1] = "all_reduce_ordered"
      op[2] = "reduce_scatter"; jc[2] = "reduce_scatter"
      jm[1] = "BLOCKING_SPLIT"; jm[2] = "NON_BLOCKING"
      fmt = "%3s  %-15s %9s %10s  %-15s %9s %10s %7s %7s\n"
      printf fmt, "W", "op", "torch us", "torch host", "jnccl mode", "jnccl us", "jnccl host", "ratio", "r.host"
      for (i = 0; i < nw; i++) for (o = 1; o <= 2; o++) for (m = 1; m <= 2; m++) {
        w = worlds[i]
        tk = w SUBSEP op[o] SUBSEP "torch" SUBSEP "torch"
        jk = w SUBSEP jc[o] SUBSEP "jnccl" SUBSEP jm[m]
        tu = cell(tk, best); th = cell(tk, hbest); ju = cell(jk, best); jh = cell(jk, hbest)
        printf fmt, w, op[o], tu, th, jm[m], ju, jh, ratio(ju, tu), ratio(jh, th)
      }
      print ""
      print "torch: dist.all_reduce(t) / dist.reduce_scatter_tensor(out, t), async_op=False, on the current stream."
      print "jnccl: comm.allReduce(t, SUM, stream) / comm.reduceScatter(t, stream) (in place into the rank'"'"'s shard),"
      print "  one process per rank (MultiRankHostCost). ratio = jnccl / torch."
    }'
} | tee "$out/summary.txt"
log "logs in $out"
exit $status
