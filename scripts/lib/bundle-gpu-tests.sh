#!/bin/sh
# The bundle's bin/gpu-tests (scripts/bundle.sh copies it there): every `gpu`-tagged test, then the
# backend-agnostic world-1 conformance tests, through JUnit's console launcher. The backend is
# chosen as the build's tests choose it: auto (real NCCL when a CUDA device is visible; else the host
# emulation, where the `gpu` tests skip themselves with the reason and the conformance tests run);
# JNCCL_TEST_BACKEND (or JNCCL_BACKEND) = cuda|host|auto overrides it. Reports and logs go to $OUT
# when set, else /tmp/jnccl-gpu. Exit status 0 when all passed.
#   gpu-tests --threads-multi-rank   the threads-mode suite at worlds 2-8 with several ranks on one
#       GPU, on the NCCL named by $JNCCL_MULTI_RANK_NCCL (2.30+; NCCL_MULTI_RANK_GPU_ENABLE=1 is set);
#       $JNCCL_MULTI_RANK_TESTS: the classes of dev.jnccl.it to run.
# JAVA_OPTS: extra JVM options.
here=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/jnccl-gpu}
mkdir -p "$out"
cp=""
for j in "$here"/lib/*.jar "$here"/tests/*; do cp="${cp:+$cp:}$j"; done # the console expands no wildcards
roots=""
for m in bindings core integration-tests; do
  [ -d "$here/tests/$m" ] && roots="${roots:+$roots:}$here/tests/$m"
done
status=0
run() { # name, launcher arguments...
  name=$1; shift
  echo "=== $name"
  # shellcheck disable=SC2086 # JAVA_OPTS is a list of options
  "$here/runtime/bin/java" --enable-native-access=ALL-UNNAMED -Djnccl.backend="${JNCCL_TEST_BACKEND:-${JNCCL_BACKEND:-auto}}" \
    ${JAVA_OPTS:-} -jar "$here/tools/junit-console.jar" execute -cp "$cp" --details=testfeed --disable-banner \
    --reports-dir="$out/$name" "$@" > "$out/$name.log" 2>&1
  code=$?
  grep -E "tests (successful|failed|skipped|aborted)|MethodSource|=>|Exception" "$out/$name.log" | head -60
  [ "$code" = 0 ] || status=1
}
if [ "${1:-}" = "--threads-multi-rank" ]; then
  [ -n "${JNCCL_MULTI_RANK_NCCL:-}" ] || { echo "gpu-tests: set JNCCL_MULTI_RANK_NCCL to an NCCL 2.30+ libnccl.so.2" >&2; exit 2; }
  export NCCL_MULTI_RANK_GPU_ENABLE=1
  JAVA_OPTS="${JAVA_OPTS:-} -Djnccl.nccl.library=$JNCCL_MULTI_RANK_NCCL -Djnccl.it.shareDevices=true -Djnccl.junit.placement=shared"
  selection=""
  for c in ${JNCCL_MULTI_RANK_TESTS:-ThreadsReductionArithmeticTest ThreadsCollectivesTest ThreadsZero3Test ThreadsFailureTest ThreadsStuckCollectiveTest}; do
    selection="$selection --select-class dev.jnccl.it.$c"
  done
  # shellcheck disable=SC2086 # one word per launcher argument
  run threads-multi-rank $selection
  exit $status
fi
run gpu-tagged --scan-classpath "$roots" --include-tag gpu --exclude-tag mpi
run conformance --select-class dev.jnccl.bindings.EmulationWorldOneConformanceTest \
  --select-class dev.jnccl.CommunicatorWorldOneTest --select-class dev.jnccl.JncclRuntimeTest \
  --select-class dev.jnccl.CopyAsyncTest --select-class dev.jnccl.PublicApiTest
exit $status
