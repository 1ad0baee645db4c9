# Shared by the integration tests: paths, mpirun, a per-test scratch directory, checks.
# Each test is a bash script that exits 0 on pass; failures say what was expected and seen.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BIN=$ROOT/build
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root || true )}
WORK=$(mktemp -d /tmp/dptrain-it-XXXXXX)
trap 'rm -rf "$WORK"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# matches [grep options] PATTERN: grep -q for the end of a pipe. grep -q stops reading at the
# first match, and a writer still writing then dies of SIGPIPE, which pipefail reports as the
# pipeline failing; this reads all of its input.
matches() { grep "$@" >/dev/null; }

# synth DIR [dptrain-data options]: a small dataset
synth() {
  local dir=$1; shift
  "$BIN/dptrain-data" synth --out "$dir" "$@" >/dev/null
}

# train NP [dptrain options]: runs dptrain under a time limit; stdout+stderr in $WORK/out, rc in $RC
train() {
  local np=$1; shift
  local t0=$SECONDS
  set +e
  timeout -k 5 120 $MPIRUN -np "$np" "$BIN/dptrain" "$@" >"$WORK/out" 2>&1
  RC=$?
  set -e
  # 124: timeout ended it; 137 after the limit: it had to be killed. (137 sooner is mpirun
  # reporting a rank that died of SIGKILL, which some tests cause on purpose.)
  if [ "$RC" = 124 ] || { [ "$RC" = 137 ] && [ $((SECONDS - t0)) -ge 120 ]; }; then
    cat "$WORK/out"; fail "dptrain hung (killed by the 120 s timeout)"
  fi
}

# refused NP [dptrain options]: train, for a run that must end by itself with an error line. When
# a rank exits non-zero, Open MPI ends the job's processes with SIGTERM and then SIGKILL
# odls_base_sigkill_timeout (1 s) later, which added 1 to 2 s to every such run; here every rank
# has printed what it had to and is leaving, so the grace is not needed. (Runs that test how
# ranks stop on a signal keep mpirun's default through train.)
refused() { MPIRUN="$MPIRUN --mca odls_base_sigkill_timeout 0" train "$@"; }

# The last value of KEY in the JSON lines of FILE whose type is TYPE.
jsonl_last() {
  local file=$1 type=$2 key=$3
  grep "\"type\":\"$type\"" "$file" | tail -n1 | sed -n "s/.*\"$key\":\([-0-9.e+]*\).*/\1/p"
}

# cluster_up N SLOTS PREFIX: an emulated cluster (tests/cluster/up) in $WORK/cluster, taken down
# (its processes killed first) when the test exits; CMPI is the mpirun command that reaches it.
# Where it cannot run (not root, no ip) the test passes with the SKIPPED line.
cluster_up() {
  local n=$1 slots=$2 prefix=$3 rc
  export DPT_CLUSTER_DIR="$WORK/cluster"
  set +e
  "$ROOT/tests/cluster/up" "$n" --slots "$slots" --prefix "$prefix" >"$WORK/up.out" 2>&1
  rc=$?
  set -e
  if [ $rc != 0 ]; then
    cat "$WORK/up.out"
    grep -q '^SKIPPED' "$WORK/up.out" && exit 0
    fail "cluster up failed"
  fi
  CLUSTER_PREFIX=$prefix
  trap '"$ROOT/tests/cluster/down" --prefix "$CLUSTER_PREFIX" >/dev/null 2>&1; rm -rf "$WORK"' EXIT
  CMPI="$MPIRUN $(cat "$DPT_CLUSTER_DIR/mpirun.args")"
}
