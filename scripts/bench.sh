#!/usr/bin/env bash
# jnccl's nccl-tests compatible benchmark (dev.jnccl.examples.bench.CollectiveBenchmark):
#   scripts/bench.sh OP [flags]     OP: all_reduce reduce_scatter all_gather sendrecv alltoall broadcast reduce gather scatter alltoallv
# nccl-tests' flags (-b -e -f -i -g -w -n -d -o -r -c -a -J) and output: the same header, columns
# (size count type redop root, then time algbw busbw #wrong out of place and in place) and footer
# (# Avg bus bandwidth), the same algbw/busbw formulas; times from CUDA events on the comms stream,
# the maximum over ranks. jnccl's own flags: --launcher threads|mpi (mpi: --ranks N processes), --transport nccl|memcpy|nccl,memcpy,
# --json FILE, --svg FILE. `scripts/bench.sh -h` lists them all. Examples:
#   scripts/bench.sh all_reduce -b 8 -e 1G -f 2 -g 2
#   scripts/bench.sh all_gather -b 1M -e 1G -f 2 -g 4 --transport nccl,memcpy --svg all_gather.svg
# On a machine without a GPU it runs on the host emulation and its header says so. stdout is the
# table; logs and (on a terminal) progress go to stderr. Finds a JDK 25+, builds what is needed;
# relative FILEs are the caller's (it runs in the caller's folder). JNCCL_BACKEND, JAVA_OPTS, SKIP_BUILD=1, FORCE_BUILD=1,
# DRY_RUN=1: see scripts/lib/example.sh. Without a JDK: bin/bench of
# the bundle (scripts/bundle.sh).
set -euo pipefail
caller_dir=$(pwd) # the program runs here: relative paths in its arguments are the caller's
cd "$(dirname "$0")/.."
. scripts/lib/jdk.sh
. scripts/lib/example.sh
require_jdk bench.sh >&2
run_example_main bench.sh dev.jnccl.examples.bench.CollectiveBenchmark "$@"
