#!/usr/bin/env bash
# The test command of jnccl: finds a JDK >= 25, makes sure the system packages the tests need are
# installed (installing them when it runs as root with apt-get, else printing the command), then
# runs `./mvnw -B install` (verify plus the local repository; extra arguments are passed to Maven,
# e.g. -Djnccl.skipSanitizers=true) and the consumer check of src/test/consumer.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib/jdk.sh # find_jdk, require_jdk: the same search as run-example.sh
require_jdk test.sh

# System packages: a C compiler and make build the host emulation; the sanitizer runtimes run its
# C test under ThreadSanitizer and AddressSanitizer/UBSan; Open MPI and MPICH run the MPI-mode tests
# (MpiWorldsTest: mpirun.openmpi and mpirun.mpich jobs of 1-4 processes).
packages=(gcc make libc6-dev libtsan2 libasan8 libubsan1 openmpi-bin libopenmpi-dev mpich libmpich-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test.sh: installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "test.sh: missing system packages: ${missing[*]}" >&2
    echo "  install them with: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

# install (verify, then into the local repository) so that the consumer check below resolves jnccl
# as a user's project does.
./mvnw -B install "$@"

# The consumer check (src/test/consumer, not a reactor module): imports jnccl-bom, depends on
# jnccl-threads and jnccl-spark, builds and runs on the module path, and runs a multi-rank JUnit test
# through jnccl-junit. Only after a build of the whole reactor.
for arg in "$@"; do
  case "$arg" in
    -pl|--projects|-pl=*|--projects=*|-rf|--resume-from|-rf=*|--resume-from=*)
      echo "test.sh: a part of the reactor was selected ($arg): skipping the consumer check"
      exit 0 ;;
  esac
done
version=$(sed -n 's:^  <version>\(.*\)</version>$:\1:p' pom.xml | head -n 1)
./mvnw -B -f src/test/consumer/pom.xml verify -Djnccl.version="$version"
