#!/usr/bin/env bash
# Runs the example program (dev.jnccl.examples.RingAllToAll): threads mode on every visible GPU (4
# ranks on the host emulation when no GPU is there), a destructive all-to-all and a ring exchange,
# every element checked. Finds a JDK 25+, builds what is needed, passes its arguments on:
#   scripts/run-example.sh [--gpus N] [--elements N] [--iterations N] [--memcpy] [--help]
# Prints OK and exits 0 when every element matched, 1 on a mismatch. JNCCL_BACKEND=cuda|host|auto
# (default auto), JAVA_OPTS, SKIP_BUILD=1: see scripts/lib/example.sh.
set -euo pipefail
caller_dir=$(pwd) # the program runs here: relative paths in its arguments are the caller's
cd "$(dirname "$0")/.."
. scripts/lib/jdk.sh
. scripts/lib/example.sh
require_jdk run-example.sh >&2
run_example_main run-example.sh dev.jnccl.examples.RingAllToAll "$@"
