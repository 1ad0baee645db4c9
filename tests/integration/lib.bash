# Shared by the integration tests: paths, mpirun, a per-test scratch directory, checks.
# Each test is a bash script that exits 0 on pass; failures say what was expected and seen.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=$ROOT/build
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
WORK=$(mktemp -d /tmp/dptrain-it-XXXXXX)
trap 'rm -rf "$WORK"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# synth DIR [dptrain-data options]: a small dataset
synth() {
  local dir=$1; shift
  "$BIN/dptrain-data" synth --out "$dir" "$@" >/dev/null
}

# train NP [dptrain options]: runs dptrain under a time limit; stdout+stderr in $WORK/out, rc in $RC
train() {
  local np=$1; shift
  set +e
  timeout -k 5 120 $MPIRUN -np "$np" "$BIN/dptrain" "$@" >"$WORK/out" 2>&1
  RC=$?
  set -e
  [ "$RC" != 124 ] && [ "$RC" != 137 ] || { cat "$WORK/out"; fail "dptrain hung (killed by the 120 s timeout)"; }
}

# The last value of KEY in the JSON lines of FILE whose type is TYPE.
jsonl_last() {
  local file=$1 type=$2 key=$3
  grep "\"type\":\"$type\"" "$file" | tail -n1 | sed -n "s/.*\"$key\":\([-0-9.e+]*\).*/\1/p"
}
