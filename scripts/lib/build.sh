# Shared by the scripts that build before they run (run-example.sh, bench.sh, spark-host-cost.sh,
# bundle.sh): build only when a source changed, and show which module Maven is on while it builds
# (a cold cache takes minutes, which must not look like a hang). Source it from the repository root.
#
#   build_needed STAMP   true when the build must run: FORCE_BUILD=1, no STAMP file yet, or a
#                        file of the sources (pom.xml files, */src, .mvn, mvnw) newer than STAMP;
#                        SKIP_BUILD=1 with a STAMP present: never.
#   maven_build NAME STAMP ARGS...
#                        ./mvnw -B ARGS with one progress line per module on stderr ("NAME: building
#                        jnccl-core [3/8], 12 s"), Maven's full output in target/jnccl-build.log (its
#                        last lines on stderr when it fails); touches STAMP when it succeeds.
#   wants_help ARGS...   true when -h or --help is among ARGS: the scripts answer without building.
#   script_help FILE     prints FILE's leading comment (its usage), without the '#'.

build_needed() {
  local stamp=$1
  [ "${FORCE_BUILD:-0}" = 1 ] && return 0
  [ -f "$stamp" ] || return 0
  [ "${SKIP_BUILD:-0}" = 1 ] && return 1
  # The stamp is older than the newest source file: something was edited, pulled or checked out since.
  [ -n "$(find pom.xml ./*/pom.xml ./*/src .mvn mvnw -newer "$stamp" -type f -print -quit 2>/dev/null)" ]
}

maven_build() {
  local name=$1 stamp=$2; shift 2
  local log=target/jnccl-build.log started=$SECONDS status=0 line
  mkdir -p target "$(dirname "$stamp")"
  local next; next=$(mktemp "${TMPDIR:-/tmp}/jnccl-stamp.XXXXXX") # taken before: edits during the build count
  echo "$name: building (./mvnw $*; full log: $log; SKIP_BUILD=1 reuses the last build)" >&2
  ./mvnw -B -ntp "$@" > "$log" 2>&1 &
  local pid=$!
  # One line per module as Maven reaches it: "[INFO] Building jnccl-core 0.1.0-SNAPSHOT [3/8]".
  tail -n +1 -f --pid="$pid" "$log" 2>/dev/null | while IFS= read -r line; do
    case $line in
      "[INFO] Building "*"["*/*"]"*)
        line=${line#\[INFO\] Building }
        echo "$name: building ${line%% *} [${line##*[}, $((SECONDS - started)) s" >&2 ;;
    esac
  done
  wait "$pid" || status=$?
  if [ "$status" != 0 ]; then
    rm -f "$next"
    echo "$name: the build failed (exit $status); the end of $log:" >&2
    tail -n 40 "$log" >&2
    return "$status"
  fi
  mv "$next" "$stamp"
  echo "$name: built in $((SECONDS - started)) s" >&2
}

wants_help() {
  local arg
  for arg in "$@"; do
    case $arg in -h|--help) return 0 ;; esac
  done
  return 1
}

script_help() {
  sed -n '2,/^[^#]/{/^#/!q;s/^# \{0,1\}//;p}' "$1"
}
