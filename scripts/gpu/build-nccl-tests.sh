#!/usr/bin/env bash
# Builds NVIDIA's nccl-tests (their public source, not part of this project) with MPI for the H200
# (sm_90 only), on a machine with nvcc and Open MPI but no NCCL, so that gpu-bench-mpi.sh has
# something to compare jnccl against on a GPU machine that has no compiler time to spare.
#
#   scripts/gpu/build-nccl-tests.sh NCCL_TESTS_SRC NCCL_SRC|nccl.h [OUT]
#
# NCCL_TESTS_SRC: nccl-tests' source tree, or a (bare) git repository of it (NCCL_TESTS_REF, default
#   HEAD, is then exported). NCCL_SRC: NCCL's source tree or git repository (NCCL_REF, default
#   v2.28.3-1): nccl.h is generated from src/nccl.h.in the way NCCL's own makefile does, with the
#   version of that ref, because the GPU machine loads its system NCCL (2.28.3) at run time and the
#   tests must call nothing newer; or a ready nccl.h (nccl_device.h then has to lie next to it).
# NCCL_LIB: the libnccl.so.2 (or .so.2.xz) to link against (any NCCL 2.x: only the soname and the
#   symbols' names end up in the binaries), default /work/shared/nccl-2.30.7-sm90/libnccl.so.2.xz.
# OUT (default .gpu/nccl-tests): build/<op>_perf, stripped, and OUT.tar.xz holding build/ only with
#   the perf programs gpu-bench-mpi.sh compares. Everything else happens in a temporary folder:
#   nothing fetched lands in the repository's tracked files (.gpu/ is git-ignored).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 NCCL_TESTS_SRC NCCL_SRC|nccl.h [OUT]" >&2; exit 2; }
tests_src=$1 nccl_src=$2 out=${3:-.gpu/nccl-tests}
nccl_lib=${NCCL_LIB:-/work/shared/nccl-2.30.7-sm90/libnccl.so.2.xz}
ops="all_reduce reduce_scatter all_gather broadcast reduce gather scatter alltoall alltoallv sendrecv"
cuda_home=${CUDA_HOME:-/usr/local/cuda}
mpi_home=${MPI_HOME:-$(dirname "$(mpicc --showme:incdirs | tr ' ' '\n' | grep -m1 .)")}
[ -f "$mpi_home/include/mpi.h" ] || { echo "$0: no mpi.h under MPI_HOME=$mpi_home" >&2; exit 2; }

work=$(mktemp -d /tmp/build-nccl-tests.XXXXXX)
trap 'rm -rf "$work"' EXIT

# A source tree as given, or the ref's tree exported from a git repository.
tree_of() { # source, ref, destination name
  if [ -f "$1/Makefile" ] || [ -f "$1/src/Makefile" ]; then cp -r "$1" "$work/$3"
  elif git -C "$1" rev-parse --git-dir >/dev/null 2>&1; then
    mkdir -p "$work/$3" && git -C "$1" archive "$2" | tar -x -C "$work/$3"
  else echo "$0: $1 is neither a source tree nor a git repository" >&2; exit 2; fi
}
tree_of "$tests_src" "${NCCL_TESTS_REF:-HEAD}" nccl-tests

# nccl.h and nccl_device.h for the NCCL version the GPU machine loads.
inc=$work/include
mkdir -p "$inc"
if [ -f "$nccl_src" ]; then
  cp "$nccl_src" "$inc/nccl.h"
  [ -f "$(dirname "$nccl_src")/nccl_device.h" ] && cp -r "$(dirname "$nccl_src")"/nccl_device* "$inc/"
else
  tree_of "$nccl_src" "${NCCL_REF:-v2.28.3-1}" nccl
  eval "$(sed -n 's/^\(NCCL_[A-Z]*\) *:= *\(.*\)$/\1="\2"/p' "$work/nccl/makefiles/version.mk")"
  version=$(printf "%d%02d%02d" "$NCCL_MAJOR" "$NCCL_MINOR" "$NCCL_PATCH")
  sed -e "s/\${nccl:Major}/$NCCL_MAJOR/g" -e "s/\${nccl:Minor}/$NCCL_MINOR/g" \
      -e "s/\${nccl:Patch}/$NCCL_PATCH/g" -e "s/\${nccl:Suffix}/${NCCL_SUFFIX:-}/g" \
      -e "s/\${nccl:Version}/$version/g" "$work/nccl/src/nccl.h.in" > "$inc/nccl.h"
  cp -r "$work/nccl/src/include/nccl_device.h" "$work/nccl/src/include/nccl_device" "$inc/"
fi
grep -m1 -H '#define NCCL_VERSION_CODE' "$inc/nccl.h"

# The library only to link against: the GPU machine's own libnccl.so.2 is loaded at run time.
mkdir -p "$work/lib"
case $nccl_lib in *.xz) xz -dc "$nccl_lib" > "$work/lib/libnccl.so.2" ;; *) cp "$nccl_lib" "$work/lib/libnccl.so.2" ;; esac
ln -s libnccl.so.2 "$work/lib/libnccl.so"

build=$work/nccl-tests/build
targets=$(for op in $ops; do printf '%s/%s_perf ' "$build" "$op"; done)
# os.build first: the perf programs link its static library, which the per-program rules only name.
make -C "$work/nccl-tests/src" -j"${JOBS:-2}" os.build $targets BUILDDIR="$build" MPI=1 MPI_HOME="$mpi_home" \
  CUDA_HOME="$cuda_home" NCCL_HOME="$work" NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90"

rm -rf "$out" && mkdir -p "$out/build"
for op in $ops; do
  strip --strip-unneeded -o "$out/build/${op}_perf" "$build/${op}_perf"
done
tar -C "$out" -cJf "$out.tar.xz" build
ls -l "$out/build" "$out.tar.xz"
