# Shared by the gpu-*.sh scripts on the GPU machine: `gpu_bundle` prints the folder of the bundle
# (scripts/bundle.sh) that scripts/stage-gpu.sh packed into .gpu/jnccl-bundle.tar.xz (xz: 31 MB
# instead of gzip's 36, so that the bundle and NCCL 2.30 fit the 64 MiB a device call carries;
# a .tar.gz from an older stage-gpu.sh still works), unpacking it to /tmp/jnccl-bundle first when
# that copy is missing or older than the archive. Prints nothing and returns 1 when there is no
# archive. `gpu_bundle_archive` prints the archive's path (returns 1 when there is none). Source it
# from the repository root.

gpu_bundle_archive() {
  local root=${1:-.} archive
  for archive in "$root/.gpu/jnccl-bundle.tar.xz" "$root/.gpu/jnccl-bundle.tar.gz"; do
    if [ -s "$archive" ]; then echo "$archive"; return 0; fi
  done
  return 1
}

gpu_bundle() {
  local archive dir=/tmp/jnccl-bundle
  if ! archive=$(gpu_bundle_archive .); then
    echo "no .gpu/jnccl-bundle.tar.xz: run scripts/stage-gpu.sh where a JDK is, and carry .gpu" >&2
    return 1
  fi
  # Under a lock: scripts run side by side (gpu-all.sh starts the MPI and world-1 parts together),
  # and one must not read the jars while another unpacks them.
  (
    flock 9
    if [ ! -x "$dir/bin/bench" ] || [ "$archive" -nt "$dir/.unpacked" ]; then
      rm -rf "$dir"
      tar xaf "$archive" -C "$(dirname "$dir")"
      touch "$dir/.unpacked"
    fi
  ) 9>"$dir.lock"
  echo "$dir"
}

# The NCCL 2.30+ library that lets several ranks of one process share a GPU (with
# NCCL_MULTI_RANK_GPU_ENABLE=1): $JNCCL_MULTI_RANK_NCCL when set, else .gpu/libnccl.so.2.xz (staged by
# scripts/stage-gpu.sh from ../shared/nccl-2.30.7-sm90) unpacked to /tmp/jnccl-nccl-multi/libnccl.so.2.
# Prints its path; returns 1 (with a message) when there is none.
multi_rank_nccl() {
  if [ -n "${JNCCL_MULTI_RANK_NCCL:-}" ]; then
    echo "$JNCCL_MULTI_RANK_NCCL"
    return 0
  fi
  if [ ! -f .gpu/libnccl.so.2.xz ]; then
    echo "no .gpu/libnccl.so.2.xz (scripts/stage-gpu.sh copies it) and no JNCCL_MULTI_RANK_NCCL" >&2
    return 1
  fi
  # Unpacked beside the copy and renamed over it, never written in place: a JVM still running from an
  # earlier part (one its `timeout` left behind: it stops the script, not the JVM) has the old file
  # mapped, and rewriting it under that JVM kills it with SIGBUS inside NCCL's code.
  local dir=/tmp/jnccl-nccl-multi
  mkdir -p "$dir" && xz -dc .gpu/libnccl.so.2.xz > "$dir/libnccl.so.2.$$" && mv -f "$dir/libnccl.so.2.$$" "$dir/libnccl.so.2" \
    || { rm -f "$dir/libnccl.so.2.$$"; echo "could not unpack .gpu/libnccl.so.2.xz into $dir" >&2; return 1; }
  echo "$dir/libnccl.so.2"
}

# nccl-tests' build folder (its *_perf programs, built with MPI=1): $NCCL_TESTS when set, else
# .gpu/nccl-tests.tar.xz (scripts/gpu/build-nccl-tests.sh) unpacked to /tmp/jnccl-nccl-tests (again
# when the archive is newer than that copy). Prints the folder; returns 1 (with a message) when
# there is neither.
nccl_tests_dir() {
  local archive=.gpu/nccl-tests.tar.xz dir=/tmp/jnccl-nccl-tests
  if [ -n "${NCCL_TESTS:-}" ]; then
    echo "$NCCL_TESTS"
    return 0
  fi
  if [ ! -s "$archive" ]; then
    echo "no NCCL_TESTS and no $archive (scripts/gpu/build-nccl-tests.sh makes it)" >&2
    return 1
  fi
  (
    flock 9
    if [ ! -x "$dir/build/all_reduce_perf" ] || [ "$archive" -nt "$dir/.unpacked" ]; then
      rm -rf "$dir" && mkdir -p "$dir"
      tar xJf "$archive" -C "$dir"
      touch "$dir/.unpacked"
    fi
  ) 9>"$dir.lock"
  echo "$dir/build"
}
