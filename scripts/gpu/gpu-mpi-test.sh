#!/usr/bin/env bash
# MPI mode on real NCCL, on the GPU machine (one GPU, Open MPI, no JDK: the bundle of
# scripts/stage-gpu.sh, unpacked to /tmp/jnccl-bundle). Every MPI process uses device 0
# (JNCCL_DEVICE=0) and has its own NCCL_HOSTID, so NCCL runs each as its own node over its socket
# transport on lo (design, "Testing"). Parts, each printed PASS or FAIL:
#   suite-w2-w4   GpuMpiWorldsTest: every transaction command, convenience operation and data type,
#                 host gathers and barrier at W = 2 and 4, element by element, a verdict per rank
#   error-string  an MPI error (invalid root) carries MPI_Error_string's text, function and rank
#   host-init     MPI initialised by the application: left alone by close, still usable
#   throw-w3      rank 1 of 3 throws mid-transaction: the job ends non-zero within 30 s, no process left
#   throw-create-w3  the same with create() and try-with-resources: the job ends within 10 s
#   late-close-w3 rank 0 of 3 closes 20 s after the others: every rank closes cleanly
#   killed-w3     rank 2 of 3 is SIGKILLed: the job ends within the watchdog timeout + 30 s, no process left
#   absent-w3     rank 2 of 3 never comes to a barrier: the others name it at the deadline (3 s), the job ends
#   late-create-w3  rank 2 of 3 creates late: the others' create names it at the init timeout, the job ends
#   verdicts-w3   MpiHangVerdictTest: a mismatched count, a skipped collective, a lagging, early or killed rank
#                 named by the same verdict on every rank (with and without JNCCL_DEBUG=detail)
#   lost-w3       MpiLostRankTest: rank 1 or 2 of 3 SIGKILLed mid-collective, or between steps (the
#                 survivors post their next all-reduce only after the death), under mpirun --enable-recovery
#                 with MpiOptions.withContinueWithoutFailedRanks(2): the survivors recover, checked sums;
#                 the KILLED/POSTED/LOST/FIRST timing lines of every case are printed after the part
#   example-w4    mpirun -np 4 bin/run-example --launcher mpi: every element checked, last line OK
# then `ALL PASSED` (exit 0) or `FAILED: parts...` (exit 1). Logs and JUnit reports go to $OUT when
# set, else /tmp/jnccl-gpu-mpi. PARTS=verdicts-w3,lost-w3 (a comma-separated list) runs those parts only.
#
#   scripts/gpu/gpu-mpi-test.sh            on the GPU (backend cuda)
#   scripts/gpu/gpu-mpi-test.sh --host     the same logic on the host emulation (any machine with Open MPI;
#                                      --bundle DIR names a bundle of scripts/bundle.sh to use)
# MPIRUN: the Open MPI launcher (default: mpirun.openmpi, else mpirun); JNCCL_MPI_LIBRARY: the
# libmpi.so.40 its processes load (default: the one next to the launcher, else the linker's).
set -uo pipefail
cd "$(dirname "$0")/../.."
backend=cuda
bundle=""
while [ $# -gt 0 ]; do
  case "$1" in
    --host) backend=host ;;
    --bundle) bundle=$2; shift ;;
    *) echo "usage: scripts/gpu/gpu-mpi-test.sh [--host] [--bundle DIR]" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$bundle" ]; then
  . scripts/gpu/lib/gpu-bundle.sh
  bundle=$(gpu_bundle) || exit 2
fi
out=${OUT:-/tmp/jnccl-gpu-mpi}
mkdir -p "$out"

if [ -z "${MPIRUN:-}" ]; then
  if command -v mpirun.openmpi >/dev/null; then MPIRUN=mpirun.openmpi; else MPIRUN=mpirun; fi
fi
export MPIRUN
user_library=${JNCCL_MPI_LIBRARY:-}
. scripts/lib/mpi.sh
mpi_detect || exit 2
[ "$MPI_KIND" = openmpi ] || { echo "gpu-mpi-test.sh: $MPI_RUN is not Open MPI ($MPI_VERSION); set MPIRUN" >&2; exit 2; }
if [ -z "$user_library" ]; then
  prefix=$(cd "$(dirname "$(command -v "$MPI_RUN")")/.." && pwd)
  for candidate in "$prefix/lib/libmpi.so.40" "$prefix/lib64/libmpi.so.40"; do
    [ -e "$candidate" ] && MPI_LIBRARY=$candidate && break
  done
fi
export JNCCL_MPI_LIBRARY=$MPI_LIBRARY
export NCCL_SOCKET_IFNAME=lo NCCL_NVLS_ENABLE=0
java="$bundle/runtime/bin/java"
echo "gpu-mpi-test.sh: $(mpi_describe); backend $backend; bundle $bundle; logs in $out"
nvidia-smi -L 2>/dev/null | head -n 2

cp=""
for j in "$bundle"/lib/*.jar "$bundle"/tests/*; do cp="${cp:+$cp:}$j"; done
failed=()
part() { # name, status
  if [ "$2" = 0 ]; then echo "PASS $1"; else echo "FAIL $1 (log: $out/$1.log)"; failed+=("$1"); fi
}
wanted() { # part name: PARTS=a,b runs those parts only (all when unset)
  [ -z "${PARTS:-}" ] || [[ ",$PARTS," == *",$1,"* ]]
}
junit() { # part name, method selector of GpuMpiWorldsTest [, a selector (--select-...=...) whose skips are expected]
  wanted "$1" || return 0
  local name=$1 method=$2 select=${3:-} not_run="skipped|aborted|failed"
  [ -n "$select" ] && not_run="failed"
  "$java" --enable-native-access=ALL-UNNAMED -Djnccl.backend="$backend" -Djnccl.it.mpi.backend="$backend" \
    -Djnccl.it.mpi.library.OPEN_MPI="$MPI_LIBRARY" ${JAVA_OPTS:-} \
    -jar "$bundle/tools/junit-console.jar" execute -cp "$cp" --details=summary --disable-banner \
    --reports-dir="$out/$name" "${select:---select-method=dev.jnccl.it.GpuMpiWorldsTest#$method}" > "$out/$name.log" 2>&1
  local code=$?
  grep -qE "tests successful" "$out/$name.log" || code=1
  grep -qE "[1-9][0-9]* tests ($not_run)" "$out/$name.log" && code=1
  grep -E "tests (successful|failed|skipped|aborted)" "$out/$name.log" | tr -s " []" " " | paste -sd, - | sed "s/^/   /"
  part "$name" "$code"
}
junit suite-w2-w4 "everyOperationChecked(int)"
junit error-string mpiErrorCarriesMpisText
junit host-init mpiInitialisedByTheApplicationIsLeftAlone
junit throw-w3 aThrowingRankEndsTheJob
junit throw-create-w3 aThrowingRankEndsTheJobWithCreateAndTryWithResources
junit late-close-w3 aRankThatClosesLateStillClosesCleanly
junit killed-w3 aKilledRankEndsTheJob
junit absent-w3 aRankAbsentFromABarrierIsNamedAtTheDeadline
junit late-create-w3 aRankThatCreatesLateIsNamedAtTheInitDeadline
# Hang forensics at W=3 on real NCCL (a mismatched count, a skipped collective, a lagging, early or
# killed rank, with and without JNCCL_DEBUG=detail): the MPICH cases and the emulation's stuck fault skip.
junit verdicts-w3 - "--select-class=dev.jnccl.it.MpiHangVerdictTest"
# A lost process: the survivors recover (RankLostException.recover()) and finish; MPICH's case skips.
junit lost-w3 - "--select-class=dev.jnccl.it.MpiLostRankTest"
# Timings (epoch ms): KILLED (the test's SIGKILL), POSTED (between steps: the survivors' next all-reduce),
# LOST (RankLostException seen), FIRST (the recovered communicator's first checked all-reduce done).
if wanted lost-w3; then
  grep -E "^(KILLED|POSTED|LOST|FIRST) rank=" "$out/lost-w3.log" | sed "s/^/   /"
fi

# The example: one process per rank, all on device 0, each its own NCCL "node".
if wanted example-w4; then
# shellcheck disable=SC2086 # MPI_FLAGS is a list of flags
timeout 300 "$MPI_RUN" -np 4 $MPI_FLAGS -x JNCCL_MPI_LIBRARY -x NCCL_SOCKET_IFNAME -x NCCL_NVLS_ENABLE \
  -x JNCCL_DEVICE=0 -x JNCCL_BACKEND="$backend" \
  sh -c 'NCCL_HOSTID=r$OMPI_COMM_WORLD_RANK exec "$0" "$@"' "$bundle/bin/run-example" --launcher mpi \
  --elements 65536 --iterations 5 > "$out/example-w4.log" 2>&1
code=$?
grep -E "^(launcher|backend|rank [0-9]|time per|OK|FAILED)" "$out/example-w4.log" | sed 's/^/    /'
grep -qx OK "$out/example-w4.log" || code=1
part example-w4 "$code"
fi

if [ ${#failed[@]} -eq 0 ]; then
  echo "ALL PASSED"
  exit 0
fi
echo "FAILED: ${failed[*]}"
exit 1
