#!/usr/bin/env bash
# Runs the example program (dev.jnccl.examples.RingAllToAll): threads mode on every visible GPU (4
# ranks on the host emulation when no GPU is there), a destructive all-to-all and a ring exchange,
# every element checked. Finds a JDK 25+, builds what is needed, passes its arguments on:
#   scripts/run-example.sh [--gpus N] [--elements N] [--iterations N] [--memcpy] [--help]
#   scripts/run-example.sh --launcher mpi|spark --ranks N [--elements N] [--iterations N]
# (spark: one barrier stage of N tasks in Spark's local mode, local[N], in one JVM)
# Prints OK and exits 0 when every element matched, 1 on a mismatch. JNCCL_BACKEND=cuda|host|auto
# (default auto), JAVA_OPTS, SKIP_BUILD=1, FORCE_BUILD=1: see scripts/lib/example.sh (it builds only
# when a source changed; --help answers at once).
set -euo pipefail
caller_dir=$(pwd) # the program runs here: relative paths in its arguments are the caller's
cd "$(dirname "$0")/.."
. scripts/lib/jdk.sh
. scripts/lib/example.sh
require_jdk run-example.sh >&2
main=dev.jnccl.examples.RingAllToAll
previous=""
for arg in "$@"; do # --launcher spark: the same program as a Spark barrier stage (jnccl-spark's test code)
  if [ "$arg" = --launcher=spark ] || { [ "$previous" = --launcher ] && [ "$arg" = spark ]; }; then
    example_module=spark main=dev.jnccl.spark.SparkRingAllToAll
  fi
  previous=$arg
done
run_example_main run-example.sh "$main" "$@"
