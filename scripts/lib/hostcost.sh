# Shared by scripts/gpu-hostcost-multi.sh and scripts/gpu-hostcost-threads.sh: finds the benchmark jar
# and a Java runtime (the bundle's on the GPU machine), and builds transaction_overhead.c for the
# backend (not with SKIP_C=1). Source it from the repository root after setting: root (the repository root), mode (gpu or
# host), work (a scratch folder) and a `log` function. Sets: bundle, jar, java_bin, backend, c_bin, build.

hostcost_prepare() {
  # The bundle that scripts/stage-gpu.sh packed (GPU machine): its JMH jar and Java runtime.
  bundle=""
  if [ -s "$root/.gpu/jnccl-bundle.tar.gz" ]; then
    . "$root/scripts/lib/gpu-bundle.sh"
    bundle=$(gpu_bundle)
  fi
  jar=""
  local candidate
  for candidate in "${JNCCL_BENCH_JAR:-}" "${bundle:+$bundle/jmh/jnccl-benchmarks.jar}" \
      "$root/examples/target/jnccl-benchmarks.jar"; do
    if [ -n "$candidate" ] && [ -s "$candidate" ]; then jar=$candidate; break; fi
  done
  [ -n "$jar" ] || { log "no benchmark jar (.gpu/jnccl-bundle.tar.gz or examples/target/jnccl-benchmarks.jar)"; return 1; }
  java_bin=${JAVA:-}
  if [ -z "$java_bin" ]; then
    if [ -n "$bundle" ]; then
      java_bin=$bundle/runtime/bin/java
    elif [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
      java_bin=$JAVA_HOME/bin/java
    elif [ -x /usr/lib/jvm/temurin-25-jdk-amd64/bin/java ]; then
      java_bin=/usr/lib/jvm/temurin-25-jdk-amd64/bin/java
    fi
  fi
  [ -n "$java_bin" ] || { log "no Java 25+: set JAVA or JAVA_HOME, or provide .gpu/jnccl-bundle.tar.gz"; return 1; }
  if [ "$mode" = gpu ] && [ -d /usr/local/cuda/lib64 ]; then
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi

  # The C program: nvcc against the machine's CUDA and NCCL, or gcc against the emulation inside the
  # jar with the emulation's own ABI header (no NVIDIA headers needed). SKIP_C=1: not built.
  backend=$([ "$mode" = gpu ] && echo cuda || echo host)
  [ "${SKIP_C:-0}" = 1 ] && return 0
  local c_src=$root/examples/src/main/c/transaction_overhead.c
  c_bin=$work/transaction_overhead
  if [ "$mode" = gpu ]; then
    local nvcc
    nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
    build=("$nvcc" -O2 -cudart shared -o "$c_bin" "$c_src" -lnccl -lpthread)
  else
    local lib
    lib=dev/jnccl/bindings/host/linux-$(uname -m | sed 's/amd64/x86_64/')/libjnccl_host.so
    if command -v unzip >/dev/null; then
      unzip -q -o -j "$jar" "$lib" -d "$work"
    else
      (cd "$work" && "$(dirname "$java_bin")/jar" xf "$jar" "$lib" && mv "$lib" .)
    fi
    build=(${CC:-gcc} -O2 -pthread -DJNCCL_HOST_ABI -I"$root/bindings/src/main/c" -o "$c_bin" "$c_src" -L"$work"
           -l:libjnccl_host.so -Wl,-rpath,"$work")
  fi
  log "building the C program: ${build[*]}"
  "${build[@]}"
}
