#!/bin/sh
# Runs one of the examples module's main classes the way every jnccl command does, so that they all
# take the same flags: scripts/run-example.sh and scripts/bench.sh (through scripts/lib/example.sh,
# after their build) and the bundle's bin/run-example and bin/bench (scripts/bundle.sh copies this
# file and mpi.sh to the bundle's tools/).
#   launch.sh NAME MAIN ARGS...     NAME prefixes the messages (e.g. bench.sh)
# It runs in the caller's folder, so relative paths in the arguments (--json FILE, --svg FILE) are
# the caller's. With `--launcher mpi` the program runs as an MPI job of N processes (--ranks N,
# default 2; --ranks is consumed here, --launcher mpi passed on) under `mpirun -np N` (mpi.sh:
# MPIRUN picks another launcher); already inside an MPI job (`mpirun -np 4 bin/run-example
# --launcher mpi`) it runs as that job's rank.
# Environment: JNCCL_BACKEND=cuda|host|auto (default auto: the GPUs when a CUDA device is visible,
# else the host emulation), JAVA_OPTS (extra JVM options), DRY_RUN=1 (run nothing: print the folder
# the program would run in and its command line, one word a line), and from scripts/lib/example.sh
# JNCCL_JAVA and JNCCL_CLASS_PATH (default: the bundle's runtime/bin/java and lib/*).
# POSIX sh: the GPU node the bundle goes to may have no bash.
tools=$(cd "$(dirname "$0")" && pwd)
java=${JNCCL_JAVA:-$tools/../runtime/bin/java}
class_path=${JNCCL_CLASS_PATH:-$tools/../lib/*}
name=$1 main=$2
shift 2
ranks=""
launcher=threads
# Take --ranks out and keep every other argument in order: POSIX sh has no arrays, so "$@" is
# rotated, each argument moved from the front to the back once.
left=$#
while [ "$left" -gt 0 ]; do
  arg=$1
  shift
  left=$((left - 1))
  case $arg in
    --ranks)
      [ "$left" -gt 0 ] || { echo "$name: --ranks needs a value" >&2; exit 2; }
      ranks=$1
      shift
      left=$((left - 1))
      continue ;;
    --ranks=*) ranks=${arg#--ranks=}; continue ;;
    --launcher) [ "$left" -gt 0 ] && launcher=$1 ;;
    --launcher=*) launcher=${arg#--launcher=} ;;
  esac
  set -- "$@" "$arg"
done
progress=""
if [ -t 2 ]; then progress="-Djnccl.bench.progress=true"; fi # the benchmark's progress line
run() {
  if [ "${DRY_RUN:-0}" = 1 ]; then
    pwd
    printf '%s\n' "$@"
    exit 0
  fi
  exec "$@"
}
. "$tools/mpi.sh"
if [ "$launcher" = mpi ] && ! mpi_inside_job; then
  mpi_detect || exit 2
  ranks=${ranks:-2}
  echo "$name: $(mpi_describe), $ranks process(es), backend ${JNCCL_BACKEND:-auto}" >&2
  # shellcheck disable=SC2086 # MPI_FLAGS and JAVA_OPTS are lists
  run "$MPI_RUN" -np "$ranks" $MPI_FLAGS "$MPI_ENV_FLAG" JNCCL_MPI_LIBRARY \
    "$java" --enable-native-access=ALL-UNNAMED ${JAVA_OPTS:-} $progress \
    -Djnccl.backend="${JNCCL_BACKEND:-auto}" -cp "$class_path" "$main" "$@"
elif [ "$launcher" = spark ]; then
  # Spark's local mode: one JVM, the program starts local[N] itself.
  set -- "$@" --ranks "${ranks:-2}"
elif [ -n "$ranks" ]; then
  echo "$name: --ranks needs --launcher mpi or spark (threads mode: --gpus / -g)" >&2
  exit 2
fi
# shellcheck disable=SC2086 # JAVA_OPTS is a list of options
run "$java" --enable-native-access=ALL-UNNAMED ${JAVA_OPTS:-} $progress \
  -Djnccl.backend="${JNCCL_BACKEND:-auto}" -cp "$class_path" "$main" "$@"
