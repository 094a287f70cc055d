#!/usr/bin/env bash
# Builds exactly what a release would upload to Maven Central, without uploading it, and checks it:
#   scripts/release-dry-run.sh [VERSION]     (default: the project's version without -SNAPSHOT)
# It copies the working tree (uncommitted changes included) to a temporary folder, sets VERSION
# there (Central takes no snapshots), and runs the release profile's build with a throwaway signing
# key (made for this run in a temporary GNUPGHOME; none of yours is used) and -DskipUpload=true:
# central-publishing-maven-plugin writes the bundle it would upload, which
# scripts/lib/CheckRelease.java then checks: each module's POM, jar, sources and javadoc jars,
# signatures and checksums, the POM elements Central requires, and that the test-only modules are
# left out. Nothing is installed into the local Maven repository. The bundle is kept in
# target/release-dry-run/central-bundle.zip. It builds everything with javadoc (several minutes), so
# it is not part of scripts/test.sh or CI: run it before a release and after changing a POM.
# Needs a JDK 25+, gpg, and the network on a cold Maven cache (the gpg and publishing plugins).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/build.sh
case ${1:-} in -h|--help) script_help "$0"; exit 0 ;; esac
. scripts/lib/jdk.sh
require_jdk release-dry-run.sh >&2
command -v gpg >/dev/null || { echo "release-dry-run.sh: gpg is needed (apt-get install gnupg)" >&2; exit 1; }
snapshot=$(sed -n 's:^  <version>\(.*\)</version>$:\1:p' pom.xml | head -1)
version=${1:-${snapshot%-SNAPSHOT}}
work=$(mktemp -d "${TMPDIR:-/tmp}/jnccl-release.XXXXXX")
trap 'gpgconf --homedir "$work/gnupg" --kill all 2>/dev/null || true; rm -rf "$work"' EXIT

echo "release-dry-run.sh: copying the working tree to $work/src, version $snapshot -> $version" >&2
mkdir -p "$work/src"
# Tracked and new files, not ignored ones (build outputs); a deleted tracked file is skipped.
git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read -cf - -T - 2>/dev/null | tar -xf - -C "$work/src"
find "$work/src" -name pom.xml -not -path '*/src/test/consumer/*' \
  -exec sed -i "s:<version>$snapshot</version>:<version>$version</version>:" {} +

export GNUPGHOME=$work/gnupg
mkdir -m 700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key "jnccl release dry run <dry-run@jnccl.invalid>" ed25519 sign 1d
cd "$work/src"
maven_build release-dry-run.sh "$work/stamp" -Prelease -DskipTests -Djnccl.skipSanitizers=true \
  -DskipUpload=true -Dmaven.install.skip=true deploy
cd - >/dev/null
mkdir -p target/release-dry-run
cp "$work/src/target/jnccl-build.log" target/release-dry-run/build.log
bundle=$(find "$work/src" -name central-bundle.zip -path '*central-publishing*' | head -1)
if [ -z "$bundle" ]; then
  echo "release-dry-run.sh: the build made no central-bundle.zip; its log: target/release-dry-run/build.log" >&2
  exit 1
fi
cp "$bundle" target/release-dry-run/
modules=jnccl-parent,jnccl-bom,jnccl-bindings,jnccl-core,jnccl-threads,jnccl-mpi,jnccl-spark,jnccl-junit,jnccl-examples
"$JAVA_HOME/bin/java" scripts/lib/CheckRelease.java target/release-dry-run/central-bundle.zip --signed \
  --expect "$modules" --absent jnccl-test-support,jnccl-integration-tests
