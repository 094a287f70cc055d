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
  if [ ! -x "$dir/bin/bench" ] || [ "$archive" -nt "$dir/.unpacked" ]; then
    rm -rf "$dir"
    tar xaf "$archive" -C "$(dirname "$dir")"
    touch "$dir/.unpacked"
  fi
  echo "$dir"
}
