#!/usr/bin/env bash
# Builds OUT: a folder that runs jnccl's example, benchmark and GPU tests on a machine with no JDK,
# Maven or network (a GPU node): a jlinked Java runtime holding only the modules jnccl needs, the
# jars and their dependencies, the test classes, and the launchers
#   OUT/bin/run-example   the example (scripts/run-example.sh's arguments)
#   OUT/bin/bench         the nccl-tests compatible benchmark (scripts/bench.sh's arguments)
#   OUT/bin/gpu-tests     every `gpu`-tagged test plus the world-1 conformance tests, JUnit's console
# and OUT/README.md. Copy OUT to the node (any path) and run OUT/bin/... there; it needs only glibc,
# and the NVIDIA driver, CUDA runtime and NCCL that jnccl finds as usual (README, "Configuration").
#
#   scripts/bundle.sh OUT         (SKIP_BUILD=1: reuse the last `./mvnw install`)
#
# It builds first (./mvnw install, tests compiled, not run), then prints the bundle's size.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 1 ] || { echo "usage: scripts/bundle.sh OUT" >&2; exit 2; }
out=$1
. scripts/lib/jdk.sh
require_jdk bundle.sh >&2
junit_console_version=1.14.4 # JUnit Platform of the build's JUnit 5.14.4

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  echo "bundle.sh: building (./mvnw install, tests compiled, not run)" >&2
  ./mvnw -B -q install -DskipTests -Djnccl.skipSanitizers=true
fi
version=$(sed -n 's:^  <version>\(.*\)</version>$:\1:p' pom.xml | head -1) # the project's, not a plugin's

stage=$(mktemp -d "${TMPDIR:-/tmp}/jnccl-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/lib" "$stage/tests" "$stage/tools" "$stage/jmh" "$stage/bin"

# Jars: the examples' runtime class path without JMH (only the JMH benchmark jar needs it), plus the
# integration tests' test class path without JUnit (the console launcher brings its own).
./mvnw -B -q -pl examples dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$stage/lib" \
  -DexcludeGroupIds=org.openjdk.jmh,net.sf.jopt-simple,org.apache.commons
./mvnw -B -q -pl integration-tests dependency:copy-dependencies -DincludeScope=test -DoutputDirectory="$stage/lib" \
  -DexcludeGroupIds=org.junit.jupiter,org.junit.platform,org.opentest4j,org.apiguardian
cp "examples/target/jnccl-examples-$version.jar" "$stage/lib/"
for m in bindings core threads mpi integration-tests; do
  if [ -d "$m/target/test-classes" ]; then cp -r "$m/target/test-classes" "$stage/tests/$m"; fi
done
[ -f examples/target/jnccl-benchmarks.jar ] && cp examples/target/jnccl-benchmarks.jar "$stage/jmh/"
console=$HOME/.m2/repository/org/junit/platform/junit-platform-console-standalone/$junit_console_version/junit-platform-console-standalone-$junit_console_version.jar
if [ ! -s "$console" ]; then
  ./mvnw -B -q dependency:get -Dartifact="org.junit.platform:junit-platform-console-standalone:$junit_console_version"
fi
cp "$console" "$stage/tools/junit-console.jar"

# The runtime: the modules jdeps finds in the jars, the tests and JUnit's launcher, plus jdk.jfr
# (jnccl's JFR events; -XX:StartFlightRecording) and jdk.unsupported. jmh.core is the examples
# module's automatic dependency, resolved here only so that jdeps can read the module.
jmh_core=$(find "$HOME/.m2/repository/org/openjdk/jmh/jmh-core" -name 'jmh-core-*.jar' | head -1)
modules=$("$JAVA_HOME/bin/jdeps" --ignore-missing-deps --print-module-deps --multi-release 25 \
  --module-path "$jmh_core" "$stage"/lib/*.jar "$stage/tools/junit-console.jar" \
  | tr ',' '\n' | grep -E '^(java|jdk)\.' | tr '\n' ',')
tests_modules=$("$JAVA_HOME/bin/jdeps" --ignore-missing-deps --print-module-deps --multi-release 25 \
  -cp "$stage/lib/*:$stage/tools/*" "$stage"/tests/* | tr ',' '\n' | grep -E '^(java|jdk)\.' | tr '\n' ',')
modules="${modules}${tests_modules}jdk.jfr,jdk.unsupported"
modules=$(echo "$modules" | tr ',' '\n' | sort -u | paste -sd, -)
echo "bundle.sh: jlink --add-modules $modules" >&2
"$JAVA_HOME/bin/jlink" --add-modules "$modules" --strip-debug --no-man-pages --no-header-files \
  --compress=zip-9 --output "$stage/runtime"

# Launchers: POSIX sh, relative to their own folder, no JDK on PATH needed.
launcher() { # name, main class, comment
  cat > "$stage/bin/$1" <<EOF
#!/bin/sh
# $3
# JNCCL_BACKEND=cuda|host|auto (default auto: the GPUs when a CUDA device is visible, else the host
# emulation), JAVA_OPTS: extra JVM options.
here=\$(cd "\$(dirname "\$0")/.." && pwd)
progress=""
if [ -t 2 ]; then progress="-Djnccl.bench.progress=true"; fi
# shellcheck disable=SC2086 # JAVA_OPTS is a list of options
exec "\$here/runtime/bin/java" --enable-native-access=ALL-UNNAMED \${JAVA_OPTS:-} \$progress \\
  -Djnccl.backend="\${JNCCL_BACKEND:-auto}" -cp "\$here/lib/*" $2 "\$@"
EOF
  chmod +x "$stage/bin/$1"
}
launcher run-example dev.jnccl.examples.RingAllToAll \
  "jnccl's example: threads mode, a destructive all-to-all and a ring exchange, every element checked (--help)."
launcher bench dev.jnccl.examples.bench.CollectiveBenchmark \
  "jnccl's nccl-tests compatible benchmark: bench OP [nccl-tests flags] (-h)."

cat > "$stage/bin/gpu-tests" <<'EOF'
#!/bin/sh
# Every `gpu`-tagged test, then the backend-agnostic world-1 conformance tests, against real NCCL
# (JNCCL_TEST_BACKEND=cuda by default; host runs them on the emulation), through JUnit's console
# launcher. Reports and logs go to $OUT when set, else /tmp/jnccl-gpu. Exit status 0 when all passed.
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
  "$here/runtime/bin/java" --enable-native-access=ALL-UNNAMED -Djnccl.backend="${JNCCL_TEST_BACKEND:-cuda}" \
    ${JAVA_OPTS:-} -jar "$here/tools/junit-console.jar" execute -cp "$cp" --details=testfeed --disable-banner \
    --reports-dir="$out/$name" "$@" > "$out/$name.log" 2>&1
  code=$?
  grep -E "tests (successful|failed|skipped|aborted)|MethodSource|=>|Exception" "$out/$name.log" | head -60
  [ "$code" = 0 ] || status=1
}
if [ "${1:-}" = "--threads-multi-rank" ]; then
  [ -n "${JNCCL_MULTI_RANK_NCCL:-}" ] || { echo "gpu-tests: set JNCCL_MULTI_RANK_NCCL to an NCCL 2.30+ libnccl.so.2" >&2; exit 2; }
  export NCCL_MULTI_RANK_GPU_ENABLE=1
  JAVA_OPTS="${JAVA_OPTS:-} -Djnccl.nccl.library=$JNCCL_MULTI_RANK_NCCL -Djnccl.it.shareDevices=true"
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
EOF
chmod +x "$stage/bin/gpu-tests"

cat > "$stage/README.md" <<EOF
# jnccl $version bundle

Runs on a Linux x86-64 machine with no JDK, Maven or network: \`runtime/\` is a Java 25 runtime
made by jlink with only the modules jnccl needs ($modules).
jnccl finds the NVIDIA driver, the CUDA runtime (libcudart.so.13 or .12) and NCCL (libnccl.so.2,
2.19+) as usual: \`LD_LIBRARY_PATH\`, the ldconfig cache, Python wheels, or \`JAVA_OPTS=-Djnccl.nccl.library=PATH\`.
Without a GPU everything runs on jnccl's host emulation (the output says so).

| command | what |
| --- | --- |
| \`bin/run-example [--gpus N] [--elements N] [--iterations N] [--memcpy]\` | the example: threads mode, destructive all-to-all and ring exchange, every element checked; prints OK |
| \`bin/bench OP [flags]\` | nccl-tests compatible benchmark: OP all_reduce, reduce_scatter, all_gather, sendrecv, alltoall, broadcast; nccl-tests' flags (-b -e -f -g -w -n -d -o -r -c -a) plus --transport, --launcher, --json, --svg; \`bin/bench -h\` |
| \`bin/gpu-tests\` | the \`gpu\`-tagged tests and the world-1 conformance tests on real NCCL; reports in \$OUT or /tmp/jnccl-gpu |
| \`mpirun -np N ... bin/run-example --launcher mpi\` | the example in MPI mode, one process per rank (scripts/gpu-mpi-test.sh shows the one-GPU form) |

Examples: \`bin/bench all_reduce -b 8 -e 1G -f 2 -g 1\`; \`JNCCL_BACKEND=cuda bin/run-example --gpus 1\`.
Environment: \`JNCCL_BACKEND\` (auto, cuda, host), \`JAVA_OPTS\`.

Contents: \`bin/\` launchers, \`runtime/\` the Java runtime, \`lib/\` jnccl and its dependencies
(SLF4J, Logback), \`tests/\` test classes, \`tools/junit-console.jar\` JUnit's console launcher,
\`jmh/jnccl-benchmarks.jar\` the JMH host-cost benchmarks (scripts/gpu-bench.sh).
Built by \`scripts/bundle.sh\` from commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (+ local changes)') on $(date -u +%Y-%m-%d).
EOF

rm -rf "$out"
mkdir -p "$(dirname "$out")"
mv "$stage" "$out"
trap - EXIT
for d in "$out" "$out/runtime" "$out/lib" "$out/tests" "$out/tools" "$out/jmh"; do
  du -sh "$d" | sed 's/^/bundle.sh: /' # one at a time: du skips folders it already counted
done
