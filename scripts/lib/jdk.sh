# Shared by the scripts: finds a JDK 25 or newer. Source it, then call `require_jdk NAME`: it exports
# JAVA_HOME (JAVA_HOME when that is 25+, else the newest 25+ under /usr/lib/jvm) or prints how to
# install one and exits 1. NAME prefixes the messages (e.g. test.sh).

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

require_jdk() { # $1: the script's name, for the messages
  local jdk
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
  echo "$1: using JDK $JAVA_HOME"
}
