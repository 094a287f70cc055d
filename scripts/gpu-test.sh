#!/usr/bin/env bash
# Runs on the GPU machine (prepared by scripts/stage-gpu.sh, with .gpu carried): every `gpu`-tagged
# test, plus the backend-agnostic world-1 conformance tests, the runtime query, copyAsync and the
# API-leak scan (read from the installed jars) against real NCCL (-Djnccl.backend=cuda),
# through JUnit's console launcher and a portable JRE. Reports go to $OUT when set.
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
run gpu-tagged --scan-classpath "$roots" --include-tag gpu
run conformance --select-class dev.jnccl.bindings.EmulationWorldOneConformanceTest \
  --select-class dev.jnccl.CommunicatorWorldOneTest --select-class dev.jnccl.JncclRuntimeTest \
  --select-class dev.jnccl.CopyAsyncTest --select-class dev.jnccl.PublicApiTest
exit $status
