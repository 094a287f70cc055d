# Shared by run-example.sh and bench.sh: builds the examples module (and what it depends
# on) and runs one of its main classes on the class path through scripts/lib/launch.sh. Source it
# from the repository root, after scripts/lib/jdk.sh's require_jdk, then call
# `run_example_main NAME CLASS ARGS...`. The scripts set caller_dir to the caller's working
# directory before they change to the repository root: the program runs there, so a relative path
# among its arguments (--json FILE, --svg FILE) means what the caller meant.
#
# Environment: SKIP_BUILD=1 (reuse the last build); DRY_RUN=1 builds nothing (and launch.sh runs
# nothing). The arguments, --launcher mpi / --ranks N, JNCCL_BACKEND and JAVA_OPTS: see
# scripts/lib/launch.sh, which runs the program here as it does in the bundle.

#
# example_module=spark (set by the caller before run_example_main): the main class is one of
# jnccl-spark's test-scope programs (Spark barrier mode), run on that module's test class path, so
# that Spark stays off the examples' own.
run_example_main() {
  local name=$1 main=$2; shift 2
  local module=${example_module:-examples} scope="" classes
  [ "$module" = spark ] && scope=-Dmdep.includeScope=test
  local cp_file=$module/target/example-classpath.txt root=$PWD
  if [ "${DRY_RUN:-0}" != 1 ] && { [ "${SKIP_BUILD:-0}" != 1 ] || [ ! -s "$cp_file" ]; }; then
    echo "$name: building (./mvnw install -pl $module -am, tests skipped)" >&2
    ./mvnw -B -q -DskipTests -Djnccl.skipSanitizers=true install -pl "$module" -am
    ./mvnw -B -q -pl "$module" dependency:build-classpath $scope -Dmdep.outputFile="$PWD/$cp_file" >/dev/null
  fi
  classes="$root/$module/target/classes"
  if [ "$module" = spark ]; then
    classes="$root/spark/target/test-classes:$classes"
    # Spark's off-heap code without its warnings; Spark's log4j2 (spark/src/test/resources/log4j2.properties),
    # not the test-scope logback also on that class path.
    export JAVA_OPTS="--sun-misc-unsafe-memory-access=allow -Dslf4j.provider=org.apache.logging.slf4j.SLF4JServiceProvider ${JAVA_OPTS:-}"
  fi
  JNCCL_CLASS_PATH="<the $module module's class path: not built yet>"
  [ -s "$cp_file" ] && JNCCL_CLASS_PATH="$classes:$(cat "$cp_file")"
  export JNCCL_CLASS_PATH JNCCL_JAVA="$JAVA_HOME/bin/java"
  cd "${caller_dir:-$root}"
  exec sh "$root/scripts/lib/launch.sh" "$name" "$main" "$@"
}
