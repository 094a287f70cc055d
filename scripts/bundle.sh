#!/usr/bin/env bash
# Builds OUT: a folder that runs jnccl's example, benchmark and GPU tests on a machine with no JDK,
# Maven or network (a GPU node): a jlinked Java runtime holding only the modules jnccl needs, the
# jars and their dependencies, the test classes, and the launchers
#   OUT/bin/run-example   the example (scripts/run-example.sh's arguments)
#   OUT/bin/bench         the nccl-tests compatible benchmark (scripts/bench.sh's arguments)
#   OUT/bin/gpu-tests     every `gpu`-tagged test plus the world-1 conformance tests, JUnit's console
# the javadoc (OUT/docs/api/<module>/index.html) and OUT/README.md. Copy OUT to the node (any path) and run OUT/bin/... there; it needs only glibc,
# and the NVIDIA driver, CUDA runtime and NCCL that jnccl finds as usual (README, "Configuration").
#
#   scripts/bundle.sh [--dry-run] OUT      (builds only when a source changed; FORCE_BUILD=1 forces it,
#                                           SKIP_BUILD=1 reuses the last `./mvnw install`)
#
# OUT is relative to the caller's folder. It must be new, an empty folder or a bundle this script
# made before (marked by OUT/.jnccl-bundle), which is replaced; anything else is refused before
# anything is built, so that no folder of the user's is ever deleted. --dry-run checks OUT, says
# what it would do and stops. It builds first (./mvnw install, tests compiled, not run), then prints
# the bundle's size.
set -euo pipefail
. "$(dirname "$0")/lib/build.sh" # build_needed, maven_build, script_help
case ${1:-} in -h|--help) script_help "$0"; exit 0 ;; esac
dry_run=0
if [ "${1:-}" = --dry-run ]; then dry_run=1; shift; fi
[ $# -eq 1 ] && [ -n "$1" ] || { echo "usage: scripts/bundle.sh [--dry-run] OUT" >&2; exit 2; }
case $1 in
  /*) out=$1 ;;
  *) out=$(pwd)/$1 ;; # the caller's folder: this script changes to the repository root below
esac
while [ "${#out}" -gt 1 ] && [ "${out%/}" != "$out" ]; do out=${out%/}; done
marker=.jnccl-bundle

# Prints what OUT is (new, empty, bundle) or, on stderr, why it may not be replaced (returns 1).
out_state() {
  if [ ! -e "$out" ] && [ ! -L "$out" ]; then
    echo new
  elif [ -L "$out" ] || [ ! -d "$out" ]; then
    echo "bundle.sh: OUT $out exists and is not a folder: refusing to replace it; name a new folder" >&2
    return 1
  elif [ -f "$out/$marker" ]; then
    echo bundle
  elif [ -z "$(ls -A "$out")" ]; then
    echo empty
  else
    echo "bundle.sh: OUT $out is a folder with files in it that is not a bundle (no $marker): refusing" \
      "to delete what it holds; name a new or empty folder, or a bundle this script made" >&2
    return 1
  fi
}
state=$(out_state) || exit 2
if [ "$dry_run" = 1 ]; then
  case $state in
    new) echo "bundle.sh: would build a new bundle in $out" ;;
    empty) echo "bundle.sh: would build a bundle in the empty folder $out" ;;
    bundle) echo "bundle.sh: would replace the bundle in $out" ;;
  esac
  exit 0
fi
cd "$(dirname "$0")/.."
. scripts/lib/jdk.sh
require_jdk bundle.sh >&2
junit_console_version=1.14.4 # JUnit Platform of the build's JUnit 5.14.4

# Only when a source changed since the last bundle build (FORCE_BUILD=1 forces, SKIP_BUILD=1 skips).
if build_needed target/jnccl-bundle.stamp; then
  maven_build bundle.sh target/jnccl-bundle.stamp install -DskipTests -Djnccl.skipSanitizers=true
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
# Copied by Maven (downloaded first if needed), wherever the local repository is (settings.xml,
# -Dmaven.repo.local): never a path under ~/.m2 assumed here.
./mvnw -B -q -N dependency:copy -Dartifact="org.junit.platform:junit-platform-console-standalone:$junit_console_version" \
  -DoutputDirectory="$stage/tools" -Dmdep.stripVersion=true
mv "$stage/tools/junit-platform-console-standalone.jar" "$stage/tools/junit-console.jar"
# The javadoc of the published modules (made by the install above), browsable on the node.
for m in bindings core threads mpi spark examples; do
  if [ -d "$m/target/reports/apidocs" ]; then mkdir -p "$stage/docs/api" && cp -r "$m/target/reports/apidocs" "$stage/docs/api/$m"; fi
done

# The runtime: the modules jdeps finds in the jars, the tests and JUnit's launcher, plus jdk.jfr
# (jnccl's JFR events; -XX:StartFlightRecording), jdk.management (com.sun.management.ThreadMXBean:
# JMH's -prof gc counts allocated bytes through it) and jdk.unsupported. jmh.core is the examples
# module's automatic dependency, resolved here only so that jdeps can read the module.
jmh_version=$(sed -n 's:.*<jmh.version>\(.*\)</jmh.version>.*:\1:p' pom.xml)
./mvnw -B -q -N dependency:copy -Dartifact="org.openjdk.jmh:jmh-core:$jmh_version" -DoutputDirectory="$stage/jdeps" \
  -Dmdep.stripVersion=true
jmh_core=$stage/jdeps/jmh-core.jar
# jnccl-junit is left out: its module requires JUnit's, which is no module here (the console launcher
# is one jar), and jdeps stops at a missing module; it needs no JDK module the others do not.
lib_jars=()
for jar in "$stage"/lib/*.jar; do
  case "$(basename "$jar")" in jnccl-junit-*) ;; *) lib_jars+=("$jar") ;; esac
done
modules=$("$JAVA_HOME/bin/jdeps" --ignore-missing-deps --print-module-deps --multi-release 25 \
  --module-path "$jmh_core" "${lib_jars[@]}" "$stage/tools/junit-console.jar" \
  | tr ',' '\n' | grep -E '^(java|jdk)\.' | tr '\n' ',')
tests_modules=$("$JAVA_HOME/bin/jdeps" --ignore-missing-deps --print-module-deps --multi-release 25 \
  -cp "$stage/lib/*:$stage/tools/*" "$stage"/tests/* | tr ',' '\n' | grep -E '^(java|jdk)\.' | tr '\n' ',')
modules="${modules}${tests_modules}jdk.jfr,jdk.management,jdk.unsupported"
modules=$(echo "$modules" | tr ',' '\n' | sort -u | paste -sd, -)
echo "bundle.sh: jlink --add-modules $modules" >&2
"$JAVA_HOME/bin/jlink" --add-modules "$modules" --strip-debug --no-man-pages --no-header-files \
  --compress=zip-9 --output "$stage/runtime"
rm -rf "$stage/jdeps"

# Launchers: POSIX sh, relative to their own folder, no JDK on PATH needed; bin/run-example and
# bin/bench run tools/launch.sh, the same file scripts/run-example.sh and scripts/bench.sh run, so
# they take the same flags (--launcher mpi --ranks N included).
cp scripts/lib/launch.sh scripts/lib/mpi.sh "$stage/tools/"
launcher() { # name, main class, comment
  cat > "$stage/bin/$1" <<EOF
#!/bin/sh
# $3
# JNCCL_BACKEND=cuda|host|auto (default auto: the GPUs when a CUDA device is visible, else the host
# emulation), JAVA_OPTS: extra JVM options; --launcher mpi --ranks N: N processes under mpirun
# (tools/launch.sh says more).
exec "\$(dirname "\$0")/../tools/launch.sh" $1 $2 "\$@"
EOF
  chmod +x "$stage/bin/$1"
}
launcher run-example dev.jnccl.examples.RingAllToAll \
  "jnccl's example: threads mode, a destructive all-to-all and a ring exchange, every element checked (--help)."
launcher bench dev.jnccl.examples.bench.CollectiveBenchmark \
  "jnccl's nccl-tests compatible benchmark: bench OP [nccl-tests flags] (-h)."

# The offline diagnosis of a job's dumps (scripts/diagnose.sh's twin): core alone, no native library.
cat > "$stage/bin/diagnose" <<'EOF'
#!/bin/sh
# jnccl's offline diagnosis: diagnose FOLDER, where the ranks wrote jnccl-rank-R-of-W.json
# (-Djnccl.diagnosis.dir, JNCCL_DIAGNOSIS_DIR): prints the verdict and a table of the ranks.
here=$(dirname "$0")/..
exec "$here/runtime/bin/java" -cp "$here/lib/*" dev.jnccl.DiagnoseDumps "$@"
EOF
chmod +x "$stage/bin/diagnose"

cp scripts/lib/bundle-gpu-tests.sh "$stage/bin/gpu-tests"
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
| \`bin/bench OP [flags]\` | nccl-tests compatible benchmark, the flags of scripts/bench.sh: OP all_reduce, reduce_scatter, all_gather, sendrecv, alltoall, broadcast, reduce, gather, scatter, alltoallv; nccl-tests' flags (-b -e -f -g -w -n -d -o -r -c -a) plus --transport, --launcher, --ranks, --json, --svg; \`bin/bench -h\` |
| \`bin/gpu-tests\` | the \`gpu\`-tagged tests and the world-1 conformance tests: on real NCCL when a CUDA device is visible, else on the emulation (the \`gpu\` tests then skip themselves); \`JNCCL_TEST_BACKEND=cuda\` requires the GPU; reports in \$OUT or /tmp/jnccl-gpu |
| \`bin/bench OP --launcher mpi --ranks N\`, \`bin/run-example --launcher mpi --ranks N\` | MPI mode, N processes under \`mpirun\` (\`MPIRUN\` picks another launcher); inside a job started by \`mpirun -np N ... bin/run-example --launcher mpi\` each process runs as its rank (scripts/gpu/gpu-mpi-test.sh shows the one-GPU form) |

Examples: \`bin/bench all_reduce -b 8 -e 1G -f 2 -g 1\`; \`JNCCL_BACKEND=cuda bin/run-example --gpus 1\`.
Environment: \`JNCCL_BACKEND\` (auto, cuda, host), \`JAVA_OPTS\`. The commands run in the caller's folder
(relative paths such as \`--json FILE\` are the caller's).

Contents: \`bin/\` launchers, \`tools/launch.sh\` and \`tools/mpi.sh\` what they run, \`runtime/\` the Java runtime, \`lib/\` jnccl and its dependencies
(SLF4J, Logback), \`tests/\` test classes, \`tools/junit-console.jar\` JUnit's console launcher,
\`docs/api/<module>/index.html\` the javadoc, \`jmh/jnccl-benchmarks.jar\` the JMH host-cost benchmarks (scripts/gpu/gpu-bench.sh), \`.jnccl-bundle\` the mark
that lets \`scripts/bundle.sh\` replace this folder.
Built by \`scripts/bundle.sh\` from commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- 2>/dev/null || echo ' (+ local changes)') on $(date -u +%Y-%m-%d).
EOF

printf 'jnccl bundle %s\n' "$version" > "$stage/$marker" # lets a later run replace this folder
# Checked again: OUT may have changed during the build; only a bundle or an empty folder is removed.
state=$(out_state) || exit 2
case $state in
  bundle) rm -rf "$out" ;;
  empty) rmdir "$out" ;;
esac
mkdir -p "$(dirname "$out")"
mv "$stage" "$out"
trap - EXIT
for d in "$out" "$out/runtime" "$out/lib" "$out/tests" "$out/tools" "$out/jmh"; do
  du -sh "$d" | sed 's/^/bundle.sh: /' # one at a time: du skips folders it already counted
done
