#!/usr/bin/env bash
# slurm/stage-data.sh, the per-node copy of a dataset to local disk: a first copy checked against
# the source's sizes and SHA256SUMS, the reuse of a valid copy, the repair of a damaged or outdated
# one, and the refusal of a copy whose checksums do not match. (The Slurm side is in slurm.sh.)
source "$(dirname "$0")/lib.bash"
S=$ROOT/slurm/stage-data.sh
export STAGE_ROOT=$WORK/nvme STAGE_PARALLEL=3
mkdir -p "$WORK/fsx" "$STAGE_ROOT"
synth "$WORK/fsx/set" --train-samples 6000 --val-samples 200
"$S" --write-sums "$WORK/fsx/set" 2>/dev/null
[ "$(wc -l <"$WORK/fsx/set/SHA256SUMS")" = 5 ] || fail "--write-sums: want 5 lines in SHA256SUMS"
(cd "$WORK/fsx/set" && sha256sum --quiet -c SHA256SUMS) || fail "--write-sums wrote wrong checksums"

# stage: runs stage-data.sh; its stdout in $WORK/stdout, stderr in $WORK/err, exit code in $RC
stage() { set +e; "$S" "$@" >"$WORK/stdout" 2>"$WORK/err"; RC=$?; set -e; }
same() { diff -r -x '.stage-*' "$WORK/fsx/set" "$1" >/dev/null; }

stage "$WORK/fsx/set"
[ "$RC" = 0 ] && [ "$(cat "$WORK/stdout")" = "$STAGE_ROOT/set" ] || { cat "$WORK/err"; fail "first copy: exit $RC, stdout '$(cat "$WORK/stdout")'"; }
same "$STAGE_ROOT/set" || fail "first copy differs from the source"
grep -q "copied 6 of 6 files, .* MB/s, SHA256SUMS verified" "$WORK/err" || { cat "$WORK/err"; fail "no copy-rate line"; }
echo "ok: $(grep copied "$WORK/err")"

stage "$WORK/fsx/set"
[ "$RC" = 0 ] && grep -q "reusing the copy in $STAGE_ROOT/set" "$WORK/err" || { cat "$WORK/err"; fail "second run did not reuse the copy"; }
echo "ok: a valid copy is reused"

# A truncated file and a file that is not in the source: the one is copied again, the other goes.
truncate -s 1000 "$STAGE_ROOT/set/train-00002-of-00004.h5"
echo stray >"$STAGE_ROOT/set/extra.h5"
stage "$WORK/fsx/set"
[ "$RC" = 0 ] && grep -q "copied 1 of 6 files" "$WORK/err" || { cat "$WORK/err"; fail "damaged copy: want 1 file copied again"; }
same "$STAGE_ROOT/set" && [ ! -e "$STAGE_ROOT/set/extra.h5" ] || fail "damaged copy not repaired"
echo "ok: a damaged copy is repaired (1 file copied again, a stray file removed)"

# The source changes (a new shard): the copy is outdated and completed.
cp "$WORK/fsx/set/val-00000-of-00001.h5" "$WORK/fsx/set/extra-00000-of-00001.h5"
"$S" --write-sums "$WORK/fsx/set" 2>/dev/null
stage "$WORK/fsx/set"
[ "$RC" = 0 ] && grep -q "copying 2 of 7 files" "$WORK/err" && same "$STAGE_ROOT/set" \
  || { cat "$WORK/err"; fail "changed source: want the new shard and SHA256SUMS copied"; }
echo "ok: a changed source is copied incrementally"

# A shard whose bytes differ from SHA256SUMS (same size): the copy is refused, exit 1.
printf 'X' | dd of="$WORK/fsx/set/train-00001-of-00004.h5" bs=1 seek=4000 conv=notrunc status=none
stage "$WORK/fsx/set" "$WORK/nvme/other"
[ "$RC" = 1 ] && grep -q "train-00001-of-00004.h5: FAILED" "$WORK/err" && grep -q "does not match SHA256SUMS" "$WORK/err" \
  || { cat "$WORK/err"; fail "checksum mismatch: want exit 1 naming the shard"; }
[ ! -e "$WORK/nvme/other/.stage-complete" ] || fail "checksum mismatch: the copy was marked complete"
echo "ok: a checksum mismatch is refused"

stage "$WORK/missing"
[ "$RC" = 1 ] && grep -q "no such directory" "$WORK/err" || { cat "$WORK/err"; fail "missing source: want exit 1"; }
echo "ok: a missing source is refused"

# An interrupted copy never leaves a partial file under a shard's name, and the next run completes
# it. The copy of a 96 MiB file is killed at several points (the kill may also land after it).
mkdir -p "$WORK/big"
head -c $((96 << 20)) /dev/urandom >"$WORK/big/train-00000-of-00001.h5"
"$S" --write-sums "$WORK/big" 2>/dev/null
for delay in 0.05 0.2 0.5; do
  rm -rf "$WORK/nvme/big"
  set +e; timeout -s KILL "$delay" "$BIN/dptrain" stage "$WORK/big" "$WORK/nvme/big" >/dev/null 2>&1; set -e
  f=$WORK/nvme/big/train-00000-of-00001.h5
  if [ -e "$f" ] && ! cmp -s "$f" "$WORK/big/train-00000-of-00001.h5"; then fail "killed after ${delay}s: a partial shard under its own name"; fi
  stage "$WORK/big" "$WORK/nvme/big"
  [ "$RC" = 0 ] && cmp -s "$f" "$WORK/big/train-00000-of-00001.h5" || { cat "$WORK/err"; fail "killed after ${delay}s: the next run did not complete the copy"; }
  ls -A "$WORK/nvme/big" | matches '^\.stage-tmp-' && fail "killed after ${delay}s: a temporary file was left behind"
done
echo "ok: an interrupted copy is never used and the next run completes it"

# dptrain --stage-dir: one copy per node (2 simulated nodes stage into the same directory: the
# lock makes the second reuse the first's copy), training reads the copy; a second run reuses it.
rm -rf "$WORK/nvme/set" "$WORK/fsx/set"
synth "$WORK/fsx/set" --train-samples 3000 --val-samples 200
"$S" --write-sums "$WORK/fsx/set" 2>/dev/null
train 2 --data "$WORK/fsx/set" --stage-dir "$WORK/nvme" --ranks-per-node 1 --steps 20 --batch-size 8 --run-dir "$WORK/run"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "--stage-dir run exited $RC"; }
grep -q "^stage: 2 nodes hold a verified copy in $WORK/nvme/set (copied on 1, reused on 1); slowest copy: rank [01] on .*: copied 6 of 6 files, .* MB/s, SHA256SUMS verified" "$WORK/out" \
  && grep -q "^data $WORK/nvme/set: " "$WORK/out" || { cat "$WORK/out"; fail "--stage-dir: no copy report or not trained from the copy"; }
same "$WORK/nvme/set" || fail "--stage-dir: the copy differs from the source"
train 2 --data "$WORK/fsx/set" --stage-dir "$WORK/nvme" --ranks-per-node 1 --steps 20 --batch-size 8 --run-dir "$WORK/run" --overwrite-checkpoints
[ "$RC" = 0 ] && grep -q "^stage: reusing the copy in $WORK/nvme/set" "$WORK/out" \
  && grep -q "^stage: 2 nodes hold a verified copy in $WORK/nvme/set (copied on 0, reused on 2)$" "$WORK/out" \
  || { cat "$WORK/out"; fail "--stage-dir: the second run did not reuse the copy"; }
echo "ok: --stage-dir copies once per node, reuses a valid copy, and trains from it"

# A source file rewritten with the same size (a dataset regenerated with the same shape) is
# copied again: a copy carries its source's modification time, and another time is another file.
mkdir -p "$WORK/same"
head -c 100000 /dev/urandom >"$WORK/same/a.bin"
"$BIN/dptrain" stage "$WORK/same" "$WORK/nvme/same" >/dev/null 2>&1 || fail "same-size: first copy failed"
head -c 100000 /dev/urandom >"$WORK/same/a.bin"
touch -d '2001-01-01' "$WORK/same/a.bin"
set +e; "$BIN/dptrain" stage "$WORK/same" "$WORK/nvme/same" >/dev/null 2>"$WORK/err"; RC=$?; set -e
[ "$RC" = 0 ] && grep -q "copied 1 of 1 files" "$WORK/err" && cmp -s "$WORK/same/a.bin" "$WORK/nvme/same/a.bin" \
  || { cat "$WORK/err"; fail "a same-size rewritten source file was not copied again"; }
echo "ok: a source file rewritten with the same size is copied again"

# A destination holding files staging did not put there is refused (staging removes strays).
mkdir -p "$WORK/mine" && echo keep >"$WORK/mine/notes.txt"
set +e; "$BIN/dptrain" stage "$WORK/same" "$WORK/mine" >/dev/null 2>"$WORK/err"; RC=$?; set -e
[ "$RC" = 1 ] && grep -q "holds files that staging did not put there" "$WORK/err" && [ -f "$WORK/mine/notes.txt" ] \
  && [ "$(ls -A "$WORK/mine")" = notes.txt ] \
  || { cat "$WORK/err"; ls -A "$WORK/mine"; fail "staging into a foreign directory was not refused, or left a file there"; }
# The source itself as the destination: refused, nothing left in it (a lock file was).
set +e; "$BIN/dptrain" stage "$WORK/same" "$WORK/same/" >/dev/null 2>"$WORK/err"; RC=$?; set -e
[ "$RC" = 1 ] && grep -q "staging would copy the directory onto itself" "$WORK/err" && [ "$(ls -A "$WORK/same")" = a.bin ] \
  || { cat "$WORK/err"; ls -A "$WORK/same"; fail "staging a directory onto itself was not refused cleanly"; }
echo "ok: a directory of other files, or the source itself, is refused, and nothing is added to it"
# A copy that stops moving (a filesystem that hangs: --inject-fault 0:1:stage-hang stops rank 0's
# copy after its first piece) ends the job after --step-timeout with one line naming the rank;
# nothing watched the copy before, and the job waited until the scheduler's limit. The waiting
# rank's watchdog (rank 1: one node, whose local rank 0 copies) stays quiet.
refused 2 --data "$WORK/fsx/set" --stage-dir "$WORK/hang" --steps 20 --batch-size 8 \
  --run-dir "$WORK/hang-run" --step-timeout 2 --inject-fault 0:1:stage-hang
[ "$RC" != 0 ] && [ "$(grep -c 'dptrain: error:' "$WORK/out")" = 1 ] \
  && grep -q "dptrain: error: set-up stuck for [0-9.]* s (--step-timeout 2): .*(rank 0 on " "$WORK/out" \
  || { cat "$WORK/out"; fail "a copy to --stage-dir that stops: want one line from rank 0's watchdog"; }
echo "ok: a copy that stops moving ends the job: $(grep -o 'dptrain: error: set-up stuck[^(]*' "$WORK/out")"
# SIGTERM while the copy runs (each piece 2 s slower: --inject-fault 0:1:stage-slow): exit 75 with
# the set-up stop line, no step trained; the next run completes the copy and trains.
( set +e; timeout -k 5 120 $MPIRUN -np 2 "$BIN/dptrain" --data "$WORK/fsx/set" --stage-dir "$WORK/slow" --steps 20 \
    --batch-size 8 --run-dir "$WORK/slow-run" --inject-fault 0:1:stage-slow >"$WORK/out" 2>&1; echo $? >"$WORK/rc" ) &
rm -f "$WORK/rc"
for _ in $(seq 300); do grep -q "^stage: copying" "$WORK/out" 2>/dev/null && break; sleep 0.1; done
for p in $(pgrep -f -- "--run-dir $WORK/slow-run( |\$)"); do [ "$(ps -o comm= -p "$p")" = dptrain ] && { kill -TERM "$p" 2>/dev/null || true; break; }; done
wait
[ "$(cat "$WORK/rc")" = 75 ] && grep -q "^stopped: a rank received SIGTERM .* during set-up, before any step" "$WORK/out" \
  && ! grep -q "^step" "$WORK/out" || { cat "$WORK/out"; fail "SIGTERM during the copy: want exit 75 and the set-up stop line, got $(cat "$WORK/rc")"; }
[ "$(cat "$WORK/slow-run/stopped-by" 2>/dev/null)" = SIGTERM ] && ! grep -q "error:" "$WORK/out" \
  || { cat "$WORK/out"; fail "SIGTERM during the copy: want RUN_DIR/stopped-by SIGTERM and no error line"; }
train 2 --data "$WORK/fsx/set" --stage-dir "$WORK/slow" --steps 20 --batch-size 8 --run-dir "$WORK/slow-run"
[ "$RC" = 0 ] && grep -q "^stage: 1 node holds a verified copy in $WORK/slow/set" "$WORK/out" && same "$WORK/slow/set" \
  || { cat "$WORK/out"; fail "the run after a stopped copy did not complete it"; }
echo "ok: SIGTERM during the copy -> exit 75; the next run completes the copy"
# A copy that fails (its file does not match SHA256SUMS) while another node's copy still runs for
# longer than --step-timeout (stage-slow: 12 MiB at 2 s a piece): the failed copier waits for it
# unwatched, and its error is the run's one line (its watchdog fired first and hid it). Two nodes
# simulated by one rank each, each staging to its own directory.
mkdir -p "$WORK/badsum"
head -c 12582912 /dev/urandom >"$WORK/badsum/big.bin"
printf '%064d  big.bin\n' 0 >"$WORK/badsum/SHA256SUMS"
set +e
timeout -k 5 120 $MPIRUN -np 1 "$BIN/dptrain" --data "$WORK/badsum" --stage-dir "$WORK/n0" --ranks-per-node 1 --step-timeout 5 \
  --run-dir "$WORK/badsum-run" : -np 1 "$BIN/dptrain" --data "$WORK/badsum" --stage-dir "$WORK/n1" --ranks-per-node 1 \
  --step-timeout 5 --run-dir "$WORK/badsum-run" --inject-fault 1:1:stage-slow >"$WORK/out" 2>&1
RC=$?
set -e
[ "$RC" = 2 ] && [ "$(grep -c 'dptrain: error:' "$WORK/out")" = 1 ] && grep -q "big.bin: FAILED: its SHA-256 does not match SHA256SUMS" "$WORK/out" \
  && ! grep -q "stuck" "$WORK/out" || { cat "$WORK/out"; fail "a failed copy beside a slow one: want its one error line, exit 2"; }
echo "ok: a failed copy waits for a slower node's unwatched: $(grep -o 'big.bin: FAILED[^;]*' "$WORK/out" | head -1)"
