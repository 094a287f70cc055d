#!/usr/bin/env bash
# The benchmarks of scripts/gpu/gpu-bench.sh on jnccl's host emulation (no GPU): C program built with
# gcc against the emulation inside the benchmark jar, JMH with jnccl.backend=host. Same arguments
# (JMH arguments; $C_ARGS, $OUT). Needs examples/target/jnccl-benchmarks.jar and a Java 25+.
exec "$(dirname "$0")/gpu/gpu-bench.sh" --host "$@"
