#!/usr/bin/env bash
# Diagnoses a job offline from the diagnosis dumps its ranks left (the role of PyTorch's fr_trace):
#   scripts/diagnose.sh FOLDER
# FOLDER is where -Djnccl.diagnosis.dir (or JNCCL_DIAGNOSIS_DIR, or
# CommunicatorOptions.withDiagnosisDirectory) pointed: one jnccl-rank-R-of-W.json per rank that wrote
# one. Reads them all, runs the same verdict as a live diagnosis, and prints it, then a table of the
# ranks (where each summary came from, status, transactions executed and known complete, the oldest
# pending one, what its thread was doing) and why each file was written. A rank that left no file is
# named unless another rank's diagnosis describes it. Exit 0 with a verdict, 2 when FOLDER holds no
# dump or a file is not one.
# Runs dev.jnccl.DiagnoseDumps from core/target/classes (built when missing or older than core's
# sources), or from JNCCL_CORE_JAR=path/to/jnccl-core.jar (the published jar: nothing is built).
set -euo pipefail
if [ $# -ne 1 ] || [ "$1" = --help ] || [ "$1" = -h ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
folder=$1
case "$folder" in /*) ;; *) folder="$(pwd)/$folder" ;; esac
cd "$(dirname "$0")/.."
. scripts/lib/jdk.sh
require_jdk diagnose.sh >&2
if [ -n "${JNCCL_CORE_JAR:-}" ]; then
  class_path=$JNCCL_CORE_JAR
else
  class_path=$PWD/core/target/classes
  tool=$class_path/dev/jnccl/DiagnoseDumps.class
  if [ ! -f "$tool" ] || [ -n "$(find core/src/main core/pom.xml -newer "$tool" -type f | head -1)" ]; then
    echo "diagnose.sh: building jnccl-core (./mvnw compile -pl core -am)" >&2
    ./mvnw -B -q -Djnccl.skipSanitizers=true -DskipTests compile -pl core -am >&2
  fi
fi
exec "$JAVA_HOME/bin/java" -cp "$class_path" dev.jnccl.DiagnoseDumps "$folder"
