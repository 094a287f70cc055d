#!/usr/bin/env bash
# The threads-mode all-gather benchmark (dev.jnccl.examples.AllGatherBenchmark): NCCL all-gather
# against the memcpy all-gather, 1 MiB .. 1 GiB, nccl-tests' columns. A program, not a test.
#   scripts/bench-allgather.sh [--world N] [--min-bytes B] [--max-bytes B] [--iterations N]
#                              [--warmup N] [--in-place] [--markdown] [--help]
# On a machine without a GPU it runs on the host emulation and says so in its header. JNCCL_BACKEND,
# JAVA_OPTS, SKIP_BUILD=1: see scripts/lib/example.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/jdk.sh
. scripts/lib/example.sh
require_jdk bench-allgather.sh >&2
run_example_main bench-allgather.sh dev.jnccl.examples.AllGatherBenchmark "$@"
