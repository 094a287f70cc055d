# Shared by run-example.sh and bench.sh: builds the examples module (and what it depends
# on) and runs one of its main classes on the class path. Source it from the repository root, after
# scripts/lib/jdk.sh's require_jdk, then call `run_example_main NAME CLASS ARGS...`.
#
# Environment: JNCCL_BACKEND (default auto: the GPUs when a CUDA device is visible, else the host
# emulation), JAVA_OPTS (extra JVM options, e.g. -Xmx8g), SKIP_BUILD=1 (reuse the last build).

run_example_main() {
  local name=$1 main=$2; shift 2
  local cp_file=examples/target/example-classpath.txt
  if [ "${SKIP_BUILD:-0}" != 1 ] || [ ! -s "$cp_file" ]; then
    echo "$name: building (./mvnw install -pl examples -am, tests skipped)" >&2
    ./mvnw -B -q -DskipTests -Djnccl.skipSanitizers=true install -pl examples -am
    ./mvnw -B -q -pl examples dependency:build-classpath -Dmdep.outputFile="$PWD/$cp_file" >/dev/null
  fi
  # shellcheck disable=SC2086 # JAVA_OPTS is a list of options
  exec "$JAVA_HOME/bin/java" --enable-native-access=ALL-UNNAMED ${JAVA_OPTS:-} \
    -Djnccl.backend="${JNCCL_BACKEND:-auto}" \
    -cp "examples/target/classes:$(cat "$cp_file")" "$main" "$@"
}
