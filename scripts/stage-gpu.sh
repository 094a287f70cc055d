#!/usr/bin/env bash
# Prepares .gpu/ (git-ignored) for a run on the GPU machine, which has no JDK, Maven or network:
# .gpu/jnccl-bundle.tar.xz, the bundle of scripts/bundle.sh (a jlinked Java runtime, the jars, the
# test classes, JUnit's console launcher, the JMH jar and the launchers bin/run-example, bin/bench,
# bin/gpu-tests), packed to about 31 MB. Carry `.gpu` and run there scripts/gpu/gpu-test.sh (tests),
# scripts/gpu/gpu-bench.sh (host-cost benchmarks) or /tmp/jnccl-bundle/bin/bench (after either
# unpacked it; or: tar xJf .gpu/jnccl-bundle.tar.xz -C /tmp). SKIP_BUILD=1: see scripts/bundle.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/jnccl-stage.XXXXXX")
trap 'rm -rf "$work"' EXIT
scripts/bundle.sh "$work/jnccl-bundle"
# Only what this script makes is replaced: a .gpu/nccl-tests.tar.xz of scripts/gpu/build-nccl-tests.sh
# (and one-off scripts put there) stay.
mkdir -p .gpu
rm -f .gpu/jnccl-bundle.tar.xz .gpu/jnccl-bundle.tar.gz .gpu/libnccl.so.2.xz
# xz, not gzip: 31 MB instead of 36, room for NCCL 2.30 below within the 64 MiB a call carries.
XZ_OPT=-9 tar cJf .gpu/jnccl-bundle.tar.xz -C "$work" jnccl-bundle
du -sh .gpu/jnccl-bundle.tar.xz
# NCCL 2.30 for the multi-rank threads suite (scripts/gpu/gpu-test.sh --threads-multi-rank): a test tool
# from ../shared, never committed; 29 MB of the 64 MiB a device call carries.
nccl_multi=$(git rev-parse --show-toplevel)/../shared/nccl-2.30.7-sm90/libnccl.so.2.xz
if [ -f "$nccl_multi" ] && [ "${JNCCL_STAGE_MULTI_RANK_NCCL:-1}" = 1 ]; then cp "$nccl_multi" .gpu/; fi
du -sh .gpu
