# Shared by run-example.sh and bench.sh: builds the examples module (and what it depends
# on) and runs one of its main classes on the class path through scripts/lib/launch.sh. Source it
# from the repository root, after scripts/lib/jdk.sh's require_jdk, then call
# `run_example_main NAME CLASS ARGS...`. The scripts set caller_dir to the caller's working
# directory before they change to the repository root: the program runs there, so a relative path
# among its arguments (--json FILE, --svg FILE) means what the caller meant.
#
# Building: only when a source changed since the last build of the module (scripts/lib/build.sh;
# FORCE_BUILD=1 builds anyway, SKIP_BUILD=1 never rebuilds once built), with a line per module while
# Maven works; -h/--help is answered without building (from the last build, else the script's usage).
# Environment: DRY_RUN=1 builds nothing (and launch.sh runs nothing). The arguments, --launcher mpi / --ranks N, JNCCL_BACKEND and JAVA_OPTS: see
# scripts/lib/launch.sh, which runs the program here as it does in the bundle.

#
# example_module=spark (set by the caller before run_example_main): the main class is one of
# jnccl-spark's test-scope programs (Spark barrier mode), run on that module's test class path, so
# that Spark stays off the examples' own.
. scripts/lib/build.sh

run_example_main() {
  local name=$1 main=$2; shift 2
  local module=${example_module:-examples} scope="" classes
  [ "$module" = spark ] && scope=-Dmdep.includeScope=test
  local cp_file=$module/target/example-classpath.txt root=$PWD stamp=$module/target/jnccl-build.stamp
  if wants_help "$@" && [ "${DRY_RUN:-0}" != 1 ] && [ ! -s "$cp_file" ]; then
    script_help "$root/scripts/$name" # not built yet: the script's own usage, at once
    echo "(the program's full list of flags: the same command once built)"
    exit 0
  fi
  if [ "${DRY_RUN:-0}" != 1 ] && ! wants_help "$@" && { [ ! -s "$cp_file" ] || build_needed "$stamp"; }; then
    maven_build "$name" "$stamp" -DskipTests -Djnccl.skipSanitizers=true install -pl "$module" -am
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
