#!/usr/bin/env bash
# The test command of jnccl: finds a JDK >= 25, makes sure the system packages the tests need are
# installed (installing them when it runs as root with apt-get, else printing the command), then
# runs `./mvnw -B verify` (extra arguments are passed to Maven, e.g. -Djnccl.skipSanitizers=true).
set -euo pipefail
cd "$(dirname "$0")/.."

java_major() { # prints the feature version of the java binary $1, or nothing
  "$1" -XshowSettings:properties -version 2>&1 | awk -F'= ' '/java.specification.version/{print $2; exit}'
}

find_jdk() {
  if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/javac" ]; then
    local v; v=$(java_major "$JAVA_HOME/bin/java")
    if [ -n "$v" ] && [ "$v" -ge 25 ]; then echo "$JAVA_HOME"; return; fi
    echo "JAVA_HOME=$JAVA_HOME is Java $v; looking for Java 25+ under /usr/lib/jvm" >&2
  fi
  local best="" best_v=0 dir v
  for dir in /usr/lib/jvm/*; do
    [ -x "$dir/bin/javac" ] || continue
    v=$(java_major "$dir/bin/java")
    if [ -n "$v" ] && [ "$v" -ge 25 ] && [ "$v" -gt "$best_v" ]; then best=$dir; best_v=$v; fi
  done
  [ -n "$best" ] && echo "$best"
}

jdk=$(find_jdk || true)
if [ -z "$jdk" ]; then
  cat >&2 <<'MSG'
jnccl needs a JDK 25 or newer and found none (JAVA_HOME, /usr/lib/jvm/*).
Install one, e.g. Eclipse Temurin 25 (https://adoptium.net; on Debian/Ubuntu: the
temurin-25-jdk package from packages.adoptium.net), then set JAVA_HOME or re-run.
MSG
  exit 1
fi
export JAVA_HOME=$jdk
echo "test.sh: using JDK $JAVA_HOME"

# System packages: a C compiler and make build the host emulation; the sanitizer runtimes run its
# C test under ThreadSanitizer and AddressSanitizer/UBSan.
packages=(gcc make libc6-dev libtsan2 libasan8 libubsan1)
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

exec ./mvnw -B verify "$@"
