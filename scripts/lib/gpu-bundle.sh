# Shared by gpu-test.sh and gpu-bench.sh on the GPU machine: `gpu_bundle` prints the folder of the
# bundle (scripts/bundle.sh) that scripts/stage-gpu.sh packed into .gpu/jnccl-bundle.tar.gz,
# unpacking it to /tmp/jnccl-bundle first when that copy is missing or older than the archive.
# Prints nothing and returns 1 when there is no archive. Source it from the repository root.

gpu_bundle() {
  local archive=.gpu/jnccl-bundle.tar.gz dir=/tmp/jnccl-bundle
  if [ ! -s "$archive" ]; then
    echo "no $archive: run scripts/stage-gpu.sh where a JDK is, and carry .gpu" >&2
    return 1
  fi
  if [ ! -x "$dir/bin/bench" ] || [ "$archive" -nt "$dir/.unpacked" ]; then
    rm -rf "$dir"
    tar xzf "$archive" -C "$(dirname "$dir")"
    touch "$dir/.unpacked"
  fi
  echo "$dir"
}
