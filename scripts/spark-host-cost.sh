#!/usr/bin/env bash
# The host-side cost in Spark barrier mode (dev.jnccl.spark.SparkHostCost, jnccl-spark's test code):
# Communicator.barrier() and a 64-byte allGatherBytesHost (over NCCL) against Spark's own
# BarrierTaskContext.barrier(), in one barrier stage of local[N]. Builds like run-example.sh:
#   scripts/spark-host-cost.sh [--tasks N] [--calls N] [--warmup N] [--spark-barriers N]
# JNCCL_BACKEND=cuda|host|auto, JAVA_OPTS, SKIP_BUILD=1: see scripts/lib/example.sh. Figures:
# docs/performance.md, "Spark barrier mode: host-side cost".
set -euo pipefail
caller_dir=$(pwd)
cd "$(dirname "$0")/.."
. scripts/lib/jdk.sh
. scripts/lib/example.sh
require_jdk spark-host-cost.sh >&2
example_module=spark
run_example_main spark-host-cost.sh dev.jnccl.spark.SparkHostCost "$@"
