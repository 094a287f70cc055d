#!/usr/bin/env bash
# Runs the elastic training example (dev.jnccl.examples.ElasticTraining): threads mode, 4 ranks on
# the host emulation (one per visible GPU otherwise) train a linear regression with all-reduced
# gradients; the last rank throws at step 5, the survivors recover (RankLostException.recover),
# reload the model from their new rank 0, re-shard the data and finish. Prints OK and exits 0 when
# the final weights match the plain-Java reference run at the same sequence of world sizes, 1
# otherwise. --replace: a spare device (4 on the emulation; the last visible GPU otherwise) gets a
# replacement rank: the survivors grow back to 4 ranks with it, and it reloads their model. JNCCL_BACKEND=cuda|host|auto (default auto), JAVA_OPTS, SKIP_BUILD=1, FORCE_BUILD=1:
# see scripts/lib/example.sh.
set -euo pipefail
caller_dir=$(pwd)
cd "$(dirname "$0")/.."
. scripts/lib/jdk.sh
. scripts/lib/example.sh
require_jdk run-elastic-example.sh >&2
run_example_main run-elastic-example.sh dev.jnccl.examples.ElasticTraining "$@"
