#!/usr/bin/env bash
# Runs on the GPU machine (prepared by scripts/stage-gpu.sh, with .gpu carried): every `gpu`-tagged
# test, plus the backend-agnostic world-1 conformance tests against real NCCL (-Djnccl.backend=cuda;
# JNCCL_TEST_BACKEND=host for the emulation), through the bundle's bin/gpu-tests (JUnit's console
# launcher on the bundle's Java runtime). Reports go to $OUT when set, else /tmp/jnccl-gpu.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu-bundle.sh
bundle=$(gpu_bundle) || exit 1
OUT=${OUT:-/tmp/jnccl-gpu} exec "$bundle/bin/gpu-tests"
