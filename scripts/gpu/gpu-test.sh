#!/usr/bin/env bash
# Runs on the GPU machine (prepared by scripts/stage-gpu.sh, with .gpu carried): every `gpu`-tagged
# test, plus the backend-agnostic world-1 conformance tests against real NCCL (-Djnccl.backend=cuda;
# JNCCL_TEST_BACKEND=host for the emulation), through the bundle's bin/gpu-tests (JUnit's console
# launcher on the bundle's Java runtime). Reports go to $OUT when set, else /tmp/jnccl-gpu.
#
#   scripts/gpu/gpu-test.sh                       the gpu-tagged and world-1 conformance tests
#   scripts/gpu/gpu-test.sh --threads-multi-rank  the threads-mode suite at worlds 2, 3, 4 and 8 with every
#       rank on the one GPU: loads NCCL 2.30 (.gpu/libnccl.so.2.xz, staged from
#       ../shared/nccl-2.30.7-sm90; or $JNCCL_MULTI_RANK_NCCL) with NCCL_MULTI_RANK_GPU_ENABLE=1, which
#       lets ranks of one process share a GPU (NCCL 2.28 refuses). JNCCL_MULTI_RANK_TESTS picks classes;
#       NCCL_MAX_NCHANNELS / NCCL_MAX_P2P_NCHANNELS default to 4 and NCCL_MAX_CTAS to 2 there (see below).
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/gpu/lib/gpu-bundle.sh
bundle=$(gpu_bundle) || exit 1
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
if [ "${1:-}" = "--threads-multi-rank" ]; then
  JNCCL_MULTI_RANK_NCCL=$(multi_rank_nccl) || { echo "gpu-test.sh: no NCCL 2.30 for --threads-multi-rank" >&2; exit 2; }
  export JNCCL_MULTI_RANK_NCCL
  # Up to 8 ranks' kernels share the one GPU, and a collective progresses only while every rank's
  # kernel is resident. With NCCL's default channel counts, two transactions in flight at world 8
  # (ThreadsCollectivesTest.overlapWithCompute) stalled in every rank for a minute on the H200; the
  # suspected cause is that the kernels no longer all fit, so the channels are capped at four per
  # kernel. Results and semantics do not depend on the channel count.
  export NCCL_MAX_NCHANNELS=${NCCL_MAX_NCHANNELS:-4} NCCL_MAX_P2P_NCHANNELS=${NCCL_MAX_P2P_NCHANNELS:-4}
  # And each kernel to two blocks: with the channel cap alone, ThreadsGraphTest at worlds 3 and 4
  # timed out (60 s) on an H100 while world 2 passed; with NCCL_MAX_CTAS=2 all seven cases passed in
  # 10 s (NCCL 2.30.7, 2026-12-06), the cap co-located setups use so that every rank's kernel stays
  # resident.
  export NCCL_MAX_CTAS=${NCCL_MAX_CTAS:-2}
fi
# The GPU machine's check: real NCCL or a failure, never a quiet fall back to the emulation
# (bin/gpu-tests alone picks auto, like the build's tests).
export JNCCL_TEST_BACKEND=${JNCCL_TEST_BACKEND:-cuda}
OUT=${OUT:-/tmp/jnccl-gpu} exec "$bundle/bin/gpu-tests" "$@"
