# Shared by the scripts that start MPI jobs (run-example.sh, bench.sh, gpu/gpu-mpi-test.sh). Source it,
# then `mpi_detect` sets:
#   MPI_RUN      the launcher: $MPIRUN if set, else mpirun (the system's default MPI)
#   MPI_KIND     openmpi or mpich (from `$MPI_RUN --version`)
#   MPI_LIBRARY  the library its processes must load: $JNCCL_MPI_LIBRARY if set, else libmpi.so.40
#                (Open MPI) or libmpich.so.12 (MPICH)
#   MPI_FLAGS    launcher flags: Open MPI as root needs --allow-run-as-root, and more processes than
#                cores need --oversubscribe (MPICH's hydra needs neither)
#   MPI_ENV_FLAG how to pass an environment variable: "-x NAME" (Open MPI) or "-genvlist NAME" (MPICH)
# and `mpi_describe` prints one line saying which MPI runs. Returns 1 (with a message) when no
# launcher is found. `mpi_inside_job` succeeds when this process was started by an MPI launcher
# (Open MPI, MPICH's hydra or a PMIx launcher), i.e. it is already one rank of a job.
# sh (dash) as well as bash: the bundle's launchers (scripts/lib/bundle/launch.sh) source it too.

mpi_detect() {
  MPI_RUN=${MPIRUN:-mpirun}
  if ! command -v "$MPI_RUN" >/dev/null 2>&1; then
    echo "no MPI launcher '$MPI_RUN' on PATH: install Open MPI (apt-get install openmpi-bin libopenmpi-dev) or MPICH" \
      "(mpich libmpich-dev), or set MPIRUN=/path/to/mpirun" >&2
    return 1
  fi
  local version
  version=$("$MPI_RUN" --version 2>&1 | head -n 3)
  case "$version" in
    *"Open MPI"*|*OpenRTE*) MPI_KIND=openmpi; MPI_LIBRARY=${JNCCL_MPI_LIBRARY:-libmpi.so.40}
      MPI_FLAGS="--oversubscribe"; [ "$(id -u)" = 0 ] && MPI_FLAGS="$MPI_FLAGS --allow-run-as-root"
      MPI_ENV_FLAG="-x" ;;
    *HYDRA*|*MPICH*) MPI_KIND=mpich; MPI_LIBRARY=${JNCCL_MPI_LIBRARY:-libmpich.so.12}; MPI_FLAGS=""
      MPI_ENV_FLAG="-genvlist" ;;
    *) echo "$MPI_RUN is neither Open MPI nor MPICH ($version); set MPIRUN" >&2; return 1 ;;
  esac
  MPI_VERSION=$(echo "$version" | head -n 1)
  export JNCCL_MPI_LIBRARY=$MPI_LIBRARY
}

mpi_describe() {
  echo "MPI: $MPI_RUN ($MPI_KIND: $MPI_VERSION), library $MPI_LIBRARY"
}

mpi_inside_job() {
  [ -n "${OMPI_COMM_WORLD_SIZE:-}${PMI_SIZE:-}${PMI_RANK:-}${PMIX_RANK:-}" ]
}
