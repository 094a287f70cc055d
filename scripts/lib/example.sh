# Shared by run-example.sh and bench.sh: builds the examples module (and what it depends
# on) and runs one of its main classes on the class path. Source it from the repository root, after
# scripts/lib/jdk.sh's require_jdk, then call `run_example_main NAME CLASS ARGS...`.
#
# Environment: JNCCL_BACKEND (default auto: the GPUs when a CUDA device is visible, else the host
# emulation), JAVA_OPTS (extra JVM options, e.g. -Xmx8g), SKIP_BUILD=1 (reuse the last build).
#
# MPI: with `--launcher mpi --ranks N` among the arguments, the program runs as an MPI job of N
# processes (one rank each) under `mpirun -np N` (MPIRUN picks another launcher, e.g.
# MPIRUN=mpirun.mpich; see scripts/lib/mpi.sh); --ranks is consumed here, --launcher mpi is passed on.

run_example_main() {
  local name=$1 main=$2; shift 2
  local cp_file=examples/target/example-classpath.txt
  if [ "${SKIP_BUILD:-0}" != 1 ] || [ ! -s "$cp_file" ]; then
    echo "$name: building (./mvnw install -pl examples -am, tests skipped)" >&2
    ./mvnw -B -q -DskipTests -Djnccl.skipSanitizers=true install -pl examples -am
    ./mvnw -B -q -pl examples dependency:build-classpath -Dmdep.outputFile="$PWD/$cp_file" >/dev/null
  fi
  local args=() ranks="" launcher=threads
  while [ $# -gt 0 ]; do
    case "$1" in
      --ranks) [ $# -ge 2 ] || { echo "$name: --ranks needs a value" >&2; exit 2; }; ranks=$2; shift 2; continue ;;
      --ranks=*) ranks=${1#--ranks=}; shift; continue ;;
      --launcher) [ $# -ge 2 ] && launcher=$2 ;;
      --launcher=*) launcher=${1#--launcher=} ;;
    esac
    args+=("$1"); shift
  done
  set -- ${args[@]+"${args[@]}"}
  local mpi=()
  if [ "$launcher" = mpi ]; then
    . scripts/lib/mpi.sh
    mpi_detect || exit 2
    ranks=${ranks:-2}
    echo "$name: $(mpi_describe), $ranks process(es), backend ${JNCCL_BACKEND:-auto}" >&2
    # shellcheck disable=SC2206 # MPI_FLAGS is a list of flags
    mpi=("$MPI_RUN" -np "$ranks" $MPI_FLAGS "$MPI_ENV_FLAG" JNCCL_MPI_LIBRARY)
  elif [ -n "$ranks" ]; then
    echo "$name: --ranks needs --launcher mpi (threads mode: --gpus / -g)" >&2; exit 2
  fi
  # shellcheck disable=SC2086 # JAVA_OPTS is a list of options
  exec ${mpi[@]+"${mpi[@]}"} "$JAVA_HOME/bin/java" --enable-native-access=ALL-UNNAMED ${JAVA_OPTS:-} \
    -Djnccl.backend="${JNCCL_BACKEND:-auto}" \
    -cp "examples/target/classes:$(cat "$cp_file")" "$main" "$@"
}
