#!/usr/bin/env bash
# Prepares .gpu/ (git-ignored) for a run on the GPU machine, which has no JDK, Maven or network:
# a portable Java 25 runtime, JUnit's console launcher, the jnccl jars with their runtime
# dependencies, the test classes, and the benchmark jar. Carry `.gpu` and run scripts/gpu-test.sh
# (tests) and scripts/gpu-bench.sh (benchmarks) there.
set -euo pipefail
cd "$(dirname "$0")/.."
export JAVA_HOME=${JAVA_HOME:-/usr/lib/jvm/temurin-25-jdk-amd64}
JUNIT_CONSOLE_VERSION=1.14.4 bash ../shared/tools/portable-jre.sh .gpu >/dev/null 2>&1 \
  || JUNIT_CONSOLE_VERSION=1.14.4 bash "$(git rev-parse --show-toplevel)/../shared/tools/portable-jre.sh" .gpu
./mvnw -B -q install -DskipTests -Djnccl.skipSanitizers=true
rm -rf .gpu/lib .gpu/cp
./mvnw -B -q -pl integration-tests dependency:copy-dependencies -DincludeScope=test -DoutputDirectory="$PWD/.gpu/lib" \
  -DexcludeGroupIds=org.junit.jupiter,org.junit.platform,org.opentest4j,org.apiguardian
mkdir -p .gpu/cp
for m in bindings core threads integration-tests; do
  [ -d "$m/target/test-classes" ] && cp -r "$m/target/test-classes" ".gpu/cp/$m-test"
done
if [ -f examples/target/jnccl-benchmarks.jar ]; then cp examples/target/jnccl-benchmarks.jar .gpu/; fi
du -sh .gpu
# NCCL 2.30 for the multi-rank threads suite (scripts/gpu-test.sh --threads-multi-rank): a test tool
# from ../shared, never committed; it is 30 MB of the 64 MiB a device call carries.
nccl_multi=$(git rev-parse --show-toplevel)/../shared/nccl-2.30.7-sm90/libnccl.so.2.xz
if [ -f "$nccl_multi" ] && [ "${JNCCL_STAGE_MULTI_RANK_NCCL:-1}" = 1 ]; then cp "$nccl_multi" .gpu/; fi
du -sh .gpu
