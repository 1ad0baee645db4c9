#!/usr/bin/env bash
# The checkpoint directory deleted during a run (someone cleaning up a job they took for dead):
# the run makes it again and takes its lock again before its next checkpoint (it wrote there
# unlocked, so a new run could take the directory and resume from this one's checkpoints); made
# again and locked by another run by then, this run stops with one line and writes nothing there.
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 2000 --val-samples 64
# "slow" makes each step 20 ms longer: a checkpoint a second, written in a few ms, so that the
# directory is never deleted under a write.
C=(--data "$WORK/data" --batch-size 8 --steps 400000 --eval-every 0 --log-every 1000 --checkpoint-every 50
   --inject-fault 0:1:slow)

# A run left behind by a failing check is ended with the test (run_all.sh ends its session too).
trap 'pkill -f -- "--run-dir $WORK/" 2>/dev/null || true; rm -rf "$WORK"' EXIT

# start_run DIR: a run in the background; its output in $WORK/bg.out, its exit code in $WORK/bg.rc
start_run() {
  rm -f "$WORK/bg.rc"
  ( set +e; timeout -k 5 120 $MPIRUN -np 2 "$BIN/dptrain" "${C[@]}" --run-dir "$1" >"$WORK/bg.out" 2>&1
    echo $? >"$WORK/bg.rc" ) &
}
# wait_for FILE: up to 30 s
wait_for() {
  for _ in $(seq 300); do [ -e "$1" ] && return 0; sleep 0.1; done
  cat "$WORK/bg.out"; fail "no $1 within 30 s"
}
# wait_rc: the background run's exit code in $rc, once it has ended (up to 60 s)
wait_rc() {
  for _ in $(seq 600); do [ -s "$WORK/bg.rc" ] && break; sleep 0.1; done
  rc=$(cat "$WORK/bg.rc" 2>/dev/null || echo "none: still running after 60 s")
}

# 1. Deleted: made again, locked again, the run goes on and still stops with a checkpoint.
run=$WORK/lost
start_run "$run"
wait_for "$run/checkpoints/ckpt-00000050.h5"
rm -rf "$run/checkpoints"
wait_for "$run/checkpoints/ckpt-00000100.h5"
flock -n "$run/checkpoints/.lock" true && fail "the re-made checkpoint directory is not locked: another run could take it"
pkill -TERM -f -- "^$BIN/dptrain .*--run-dir $run" || true
wait_rc
[ "$rc" = 75 ] || { cat "$WORK/bg.out"; fail "deleted checkpoint directory: want the run to go on and stop with exit 75, got $rc"; }
[ "$(grep -c "^dptrain: warning: --checkpoint-dir $run/checkpoints: its directory was deleted during this run: made again and locked before the checkpoint of step 100; the checkpoints before it went with the directory" "$WORK/bg.out")" = 1 ] \
  || { cat "$WORK/bg.out"; fail "deleted checkpoint directory: want one warning naming it and the step"; }
echo "ok: a checkpoint directory deleted during the run is made again and locked (one warning), exit $rc"

# 2. Replaced, and another run holds the new one's lock: this run stops with one line, exit 2,
# and writes nothing into the other run's directory. The other run's directory is locked before it
# replaces this one's (a rename keeps the lock), so this run cannot take it first.
run=$WORK/taken
start_run "$run"
mkdir -p "$WORK/other"
flock -o "$WORK/other/.lock" sleep 60 &
holder=$!
for _ in $(seq 100); do flock -n "$WORK/other/.lock" true || break; sleep 0.1; done
wait_for "$run/checkpoints/ckpt-00000050.h5"
rm -rf "$run/checkpoints"
mv -T "$WORK/other" "$run/checkpoints"  # -T: a directory made again meanwhile fails the move, not takes it in
wait_rc
pkill -P "$holder" sleep || true
[ "$rc" = 2 ] || { cat "$WORK/bg.out"; fail "a checkpoint directory another run holds: want exit 2, got $rc"; }
[ "$(grep -c "^dptrain: error: --checkpoint-dir $run/checkpoints was deleted or replaced during this run, and another dptrain holds it now" "$WORK/bg.out")" = 1 ] \
  || { cat "$WORK/bg.out"; fail "a checkpoint directory another run holds: want one line naming it"; }
[ -z "$(ls "$run/checkpoints" | grep -v '^\.lock$' || true)" ] && [ -z "$(ls -A "$run/checkpoints" | grep -v '^\.lock$' || true)" ] \
  || { ls -A "$run/checkpoints"; fail "the run wrote into the directory another run holds"; }
echo "ok: a replaced checkpoint directory held by another run: $(grep '^dptrain: error:' "$WORK/bg.out")"
