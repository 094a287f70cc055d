#!/usr/bin/env bash
# Runs on the GPU machine (prepared by scripts/stage-gpu.sh, with .gpu carried): every `gpu`-tagged
# test, plus the backend-agnostic world-1 conformance tests, the runtime query, copyAsync and the
# API-leak scan (read from the installed jars) against real NCCL (-Djnccl.backend=cuda),
# through JUnit's console launcher and a portable JRE. Reports go to $OUT when set.
#
#   scripts/gpu-test.sh                       the gpu-tagged and world-1 conformance tests
#   scripts/gpu-test.sh --threads-multi-rank  the threads-mode suite at worlds 2, 3, 4 and 8 with every
#       rank on the one GPU: loads NCCL 2.30 (.gpu/libnccl.so.2.xz, staged from
#       ../shared/nccl-2.30.7-sm90; or $JNCCL_MULTI_RANK_NCCL) with NCCL_MULTI_RANK_GPU_ENABLE=1, which
#       lets ranks of one process share a GPU (NCCL 2.28 refuses), and -Djnccl.it.shareDevices=true.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x /tmp/jre/bin/java ] || tar xzf .gpu/jre.tar.gz -C /tmp
java=/tmp/jre/bin/java
out=${OUT:-/tmp/jnccl-gpu}
mkdir -p "$out"
cp=$(ls .gpu/lib/*.jar | tr '\n' ':').gpu/cp/bindings-test:.gpu/cp/core-test:.gpu/cp/threads-test:.gpu/cp/integration-tests-test
roots=.gpu/cp/bindings-test:.gpu/cp/core-test:.gpu/cp/integration-tests-test
status=0
run() { # name, extra launcher args...
  local name=$1; shift
  echo "=== $name"
  "$java" --enable-native-access=ALL-UNNAMED -Djnccl.backend=${JNCCL_TEST_BACKEND:-cuda} -jar .gpu/junit-console.jar execute \
    -cp "$cp" --details=summary --disable-banner --reports-dir="$out/$name" "$@" 2>&1 | tee "$out/$name.log" \
    | grep -E "tests (successful|failed|skipped|aborted)|MethodSource|=>|Exception" | head -60
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
}
export NCCL_NVLS_ENABLE=0
if [ "${1:-}" = "--threads-multi-rank" ]; then
  shift
  nccl=${JNCCL_MULTI_RANK_NCCL:-}
  if [ -z "$nccl" ]; then
    [ -f .gpu/libnccl.so.2.xz ] || { echo "gpu-test.sh: no .gpu/libnccl.so.2.xz (scripts/stage-gpu.sh copies it)" >&2; exit 2; }
    mkdir -p /tmp/jnccl-nccl-multi && xz -dc .gpu/libnccl.so.2.xz > /tmp/jnccl-nccl-multi/libnccl.so.2
    nccl=/tmp/jnccl-nccl-multi/libnccl.so.2
  fi
  export NCCL_MULTI_RANK_GPU_ENABLE=1
  multi=(-Djnccl.nccl.library="$nccl" -Djnccl.it.shareDevices=true)
  run() { # name, extra launcher args... (the JVM flags of the multi-rank run)
    local name=$1; shift
    echo "=== $name"
    "$java" --enable-native-access=ALL-UNNAMED -Djnccl.backend=cuda "${multi[@]}" -jar .gpu/junit-console.jar \
      execute -cp "$cp" --details=summary --disable-banner --reports-dir="$out/$name" "$@" 2>&1 | tee "$out/$name.log" \
      | grep -E "tests (successful|failed|skipped|aborted)|MethodSource|=>|Exception" | head -80
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  }
  classes=()
  for c in ${JNCCL_MULTI_RANK_TESTS:-ThreadsReductionArithmeticTest ThreadsCollectivesTest ThreadsZero3Test ThreadsFailureTest}; do
    classes+=(--select-class "dev.jnccl.it.$c")
  done
  run threads-multi-rank "${classes[@]}" "$@"
  exit $status
fi
run gpu-tagged --scan-classpath "$roots" --include-tag gpu
run conformance --select-class dev.jnccl.bindings.EmulationWorldOneConformanceTest \
  --select-class dev.jnccl.CommunicatorWorldOneTest --select-class dev.jnccl.JncclRuntimeTest \
  --select-class dev.jnccl.CopyAsyncTest --select-class dev.jnccl.PublicApiTest
exit $status
