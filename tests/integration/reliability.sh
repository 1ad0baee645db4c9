#!/usr/bin/env bash
# Failures, each made to happen (signals from outside, --inject-fault inside) and what dptrain
# must do: docs/RELIABILITY.md lists them with this test.
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 4000 --val-samples 256
C=(--data "$WORK/data" --batch-size 8 --eval-every 0 --log-every 1000)

# --- preemption: SIGUSR1 to one rank / SIGTERM to another run's rank -> every rank stops at the
# next step boundary, checkpoint, exit 75; --resume auto then ends bit-identical to a run that
# never stopped.
for sig in USR1 TERM; do
  run="$WORK/pre-$sig"
  ( set +e; timeout -k 5 120 $MPIRUN -np 2 "$BIN/dptrain" "${C[@]}" --steps 400000 --run-dir "$run" >"$WORK/pre.out" 2>&1
    echo $? >"$WORK/pre.rc" ) &
  # Signalled once training runs (its first step record): the handlers are in place by then.
  for _ in $(seq 300); do grep -q '"type":"step"' "$run/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
  grep -q '"type":"step"' "$run/metrics.jsonl" 2>/dev/null || { cat "$WORK/pre.out"; fail "SIG$sig: no step record within 30 s"; }
  victim=$(pgrep -f -- "--run-dir $run" | while read -r p; do if [ "$(ps -o comm= -p "$p")" = dptrain ]; then echo "$p"; fi; done | tail -n1)
  [ -n "$victim" ] || fail "no dptrain rank to signal"
  kill -"$sig" "$victim"
  wait
  rc=$(cat "$WORK/pre.rc")
  [ "$rc" = 75 ] || { cat "$WORK/pre.out"; fail "SIG$sig: want exit 75, got $rc"; }
  # A requeue is asked for only after a preemption notice; SIGTERM ends the job on purpose.
  if [ "$sig" = USR1 ]; then want="^exit 75: requeue the job with --resume auto"; else want="^exit 75: stopped with a checkpoint;"; fi
  grep -q "$want" "$WORK/pre.out" || { cat "$WORK/pre.out"; fail "SIG$sig: the exit-75 line is not '$want'"; }
  at=$(sed -n 's/.*stopped after step \([0-9]*\) with a checkpoint.*/\1/p' "$WORK/pre.out")
  ck=$(printf '%s/checkpoints/ckpt-%08d.h5' "$run" "$at")
  "$BIN/dptrain-ckpt" info "$ck" >/dev/null || fail "SIG$sig: no valid checkpoint at step $at"
  echo "ok: SIG$sig -> exit 75, checkpoint at step $at"
done
# Exactness of the resume after a signal: continue the USR1 run for 50 more steps, and train
# the same total straight.
at=$(ls "$WORK/pre-USR1/checkpoints" | sed -n 's/ckpt-0*\([0-9]*\).h5/\1/p' | sort -n | tail -n1)
total=$((at + 50))
train 2 "${C[@]}" --steps 400000 --stop-after 50 --run-dir "$WORK/pre-USR1" --resume auto
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "resume after preemption exited $RC"; }
train 2 "${C[@]}" --steps 400000 --stop-after "$total" --run-dir "$WORK/straight"
"$BIN/dptrain-ckpt" diff "$(printf '%s/checkpoints/ckpt-%08d.h5' "$WORK/pre-USR1" "$total")" \
  "$(printf '%s/checkpoints/ckpt-%08d.h5' "$WORK/straight" "$total")" || fail "resume after preemption is not exact"

# --- a stop signal mid-step does not wait for the step: SIGTERM during rank 1's forward of step 30
# leaves step 30 out on every rank (checkpoint of step 29, no extra step), and during its backward
# the step is applied and the next one left out (checkpoint of step 30). Before, the stop was seen
# one step later, at the end of step 31: with long steps, a step's time more before the checkpoint.
# Either way, resuming reaches the uninterrupted run's parameters exactly.
for when in forward backward; do
  train 2 "${C[@]}" --steps 60 --checkpoint-every 0 --run-dir "$WORK/mid-$when" --inject-fault "1:30:term-in-$when"
  want=$([ "$when" = forward ] && echo 29 || echo 30)
  [ "$RC" = 75 ] && grep -q "^stop: step $((want + 1)) left out (the stop came before its backward); checkpoint of step $want" "$WORK/out" \
    && grep -q "stopped after step $want with a checkpoint" "$WORK/out" \
    && grep -q "^step breakdown over $((want - 1)) steps (the first, a warm-up, left out)" "$WORK/out" \
    || { cat "$WORK/out"; fail "SIGTERM in step 30's $when: want step $((want + 1)) left out (of the breakdown too) and a checkpoint of step $want"; }
  train 2 "${C[@]}" --steps 60 --checkpoint-every 0 --run-dir "$WORK/mid-$when" --resume auto
  [ "$RC" = 0 ] || { cat "$WORK/out"; fail "resume after SIGTERM in $when: exit $RC"; }
  echo "ok: SIGTERM in step 30's $when -> step $((want + 1)) left out, checkpoint of step $want, resumed"
done
train 2 "${C[@]}" --steps 60 --checkpoint-every 0 --run-dir "$WORK/mid-straight"
for when in forward backward; do
  "$BIN/dptrain-ckpt" diff "$WORK/mid-$when/checkpoints/ckpt-00000060.h5" "$WORK/mid-straight/checkpoints/ckpt-00000060.h5" >/dev/null \
    || fail "the run stopped in step 30's $when did not end where the uninterrupted one did"
done
echo "ok: both stopped runs end bit-identical to the uninterrupted one"
# A stop that comes while a checkpoint of that very step is written does not write it again.
train 2 "${C[@]}" --steps 60 --checkpoint-every 30 --run-dir "$WORK/mid-ckpt" --inject-fault 1:30:term-in-backward
[ "$RC" = 75 ] && grep -q "^stop: step 31 left out .*checkpoint of step 30 (written just before)" "$WORK/out" \
  && grep -q "^  ckpt .* 1 written by rank 0" "$WORK/out" \
  || { cat "$WORK/out"; fail "a stop right after the checkpoint of step 30: want it written once"; }
echo "ok: a stop right after a checkpoint does not write it twice"
# Nor one before the first step of a resumed run: the checkpoint it resumed from is that step's
# (it was written again, costing the stop a whole write).
inode=$(stat -c %i "$WORK/mid-ckpt/checkpoints/ckpt-00000030.h5")
train 2 "${C[@]}" --steps 60 --checkpoint-every 30 --run-dir "$WORK/mid-ckpt" --resume auto --inject-fault 1:31:term-in-forward
[ "$RC" = 75 ] && grep -q "^stop: step 31 left out .*checkpoint of step 30 (the one this run resumed from)" "$WORK/out" \
  && grep -q "^checkpoint: $WORK/mid-ckpt/checkpoints/ckpt-00000030.h5$" "$WORK/out" \
  && [ "$(stat -c %i "$WORK/mid-ckpt/checkpoints/ckpt-00000030.h5")" = "$inode" ] \
  || { cat "$WORK/out"; fail "a stop before a resumed run's first step: want the checkpoint it resumed from named, not written again"; }
echo "ok: a stop before a resumed run's first step names the checkpoint it resumed from, written once"

# --- a hung rank: the watchdog names it and its phase, and the job ends within the timeout.
t0=$SECONDS
train 2 "${C[@]}" --steps 100 --run-dir "$WORK/hang" --inject-fault 1:20:hang --step-timeout 3
grep -q "^dptrain: error: step 20 stuck in forward for [0-9.]* s (--step-timeout 3) (rank 1 on " "$WORK/out" \
  || { cat "$WORK/out"; fail "hang: no line naming rank 1 stuck in forward"; }
[ "$RC" != 0 ] && [ $((SECONDS - t0)) -le 30 ] || fail "hang: exit $RC after $((SECONDS - t0)) s"
echo "ok: hang -> $(grep '^dptrain: error' "$WORK/out")"

# --- a rank killed with SIGKILL: the whole job ends non-zero, well within --step-timeout.
t0=$SECONDS
train 2 "${C[@]}" --steps 100 --run-dir "$WORK/kill" --inject-fault 1:20:kill --step-timeout 20
[ "$RC" != 0 ] && [ $((SECONDS - t0)) -le 20 ] || { cat "$WORK/out"; fail "kill: exit $RC after $((SECONDS - t0)) s"; }
echo "ok: SIGKILL of rank 1 -> exit $RC after $((SECONDS - t0)) s"

# --- every line a rank printed survives SIGKILL: its stdout, when a pipe or a file (srun's, a
# job's log; mpirun gives its ranks a terminal), is written line by line. One rank started without
# a launcher, its output into a file, killed once it has logged step 100.
run="$WORK/lines"
"$BIN/dptrain" "${C[@]}" --steps 400000 --log-every 100 --run-dir "$run" >"$WORK/lines.out" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q '"type":"step"' "$run/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
grep -q '"type":"step"' "$run/metrics.jsonl" || { kill -9 $pid; fail "lines: no step record within 30 s"; }
kill -9 $pid
wait $pid || true
grep -q "^model mlp " "$WORK/lines.out" && grep -qE "^step +100/400000 " "$WORK/lines.out" \
  || { cat "$WORK/lines.out"; fail "lines: after SIGKILL the log lacks the banner or step 100"; }
echo "ok: SIGKILL of a rank writing into a file -> the log still holds the banner and step 100"

# --- NaN gradient: stop (exit 4, one line, parameters untouched) or skip (go on, finite result).
train 2 "${C[@]}" --steps 30 --run-dir "$WORK/nan-stop" --inject-fault 0:12:nan --checkpoint-every 10
[ "$RC" = 4 ] && grep -q "^dptrain: error: step 12: non-finite gradient" "$WORK/out" \
  || { cat "$WORK/out"; fail "nan stop: want exit 4 and a line"; }
train 2 "${C[@]}" --steps 30 --run-dir "$WORK/nan-skip" --inject-fault 0:12:nan,1:15:nan --on-nonfinite skip
[ "$RC" = 0 ] && grep -q "2 non-finite steps skipped" "$WORK/out" || { cat "$WORK/out"; fail "nan skip"; }
"$BIN/dptrain-ckpt" info "$WORK/nan-skip/checkpoints/ckpt-00000030.h5" >"$WORK/info" || fail "nan skip: non-finite parameters"
# A skipped step is no update: the checkpoint counts 28 for AdamW's bias correction (PyTorch's
# count; it took the step, 30), and a run resumed after the skips continues that count exactly.
grep -q "step 30 (28 updates: 2 skipped)" "$WORK/info" || { cat "$WORK/info"; fail "nan skip: the checkpoint does not count 28 updates"; }
train 2 "${C[@]}" --steps 30 --stop-after 20 --run-dir "$WORK/nan-resume" --inject-fault 0:12:nan,1:15:nan --on-nonfinite skip
train 2 "${C[@]}" --steps 30 --run-dir "$WORK/nan-resume" --resume auto --on-nonfinite skip
[ "$RC" = 0 ] && "$BIN/dptrain-ckpt" diff "$WORK/nan-skip/checkpoints/ckpt-00000030.h5" "$WORK/nan-resume/checkpoints/ckpt-00000030.h5" \
  || { cat "$WORK/out"; fail "nan skip: a run resumed after the skips is not the straight run"; }
echo "ok: NaN -> stop exit 4 / skip 2 steps with finite parameters, 28 updates counted, resumed exactly"

# --- a NaN in the data: the stop names the shard, row and feature, and does not advise a lower
# --lr (the same row comes back at the same step on a resume); skip mode names it too.
cp -r "$WORK/data" "$WORK/nandata"
/usr/bin/python3 - "$WORK/nandata/train-00001-of-00004.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f["features"][5, 3] = float("nan")
PY
train 2 --data "$WORK/nandata" --batch-size 8 --eval-every 0 --log-every 1000 --steps 300 --run-dir "$WORK/nanrow"
[ "$RC" = 4 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] \
  && grep -qE "^dptrain: error: step [0-9]+: non-finite (loss|gradient) from a non-finite input \\(rank [01]: $WORK/nandata/train-00001-of-00004\\.h5 row 5, feature 3 = nan\\) .*Fix or drop that row" "$WORK/out" \
  && ! grep -q -- "--lr" "$WORK/out" || { cat "$WORK/out"; fail "NaN in the data: want exit 4 and one line naming the row"; }
echo "ok: NaN in the data -> $(grep '^dptrain: error:' "$WORK/out" | cut -c1-150)..."
# A NaN among the validation features: named once by the rank that read it (it was evaluated unseen).
cp -r "$WORK/data" "$WORK/nanval"
/usr/bin/python3 -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r+"); f["features"][40, 2] = float("nan"); f.close()' \
  "$WORK/nanval/val-00000-of-00001.h5"
train 2 --data "$WORK/nanval" --batch-size 8 --eval-every 10 --log-every 1000 --steps 20 --run-dir "$WORK/nanvalrun"
[ "$RC" = 0 ] && [ "$(grep -c "^dptrain: warning: validation $WORK/nanval/val-00000-of-00001.h5 row 40, feature 2 = nan" "$WORK/out")" = 1 ] \
  || { cat "$WORK/out"; fail "NaN in the validation data: want one warning naming the row"; }
echo "ok: NaN in the validation data -> one warning naming the row"
train 2 --data "$WORK/nandata" --batch-size 8 --eval-every 0 --log-every 1000 --steps 300 --run-dir "$WORK/nanskip" --on-nonfinite skip
[ "$RC" = 0 ] && grep -qE "^warning: step [0-9]+: non-finite (loss|gradient) from a non-finite input \\(rank [01]: .*train-00001-of-00004\\.h5 row 5, feature 3 = nan\\); step skipped" "$WORK/out" \
  || { cat "$WORK/out"; fail "NaN in the data, skip: want the skipped step to name the row"; }

# With micro-batches (--grad-accum 4), the NaN row is named whichever micro-batch held it.
train 2 --data "$WORK/nandata" --batch-size 2 --grad-accum 4 --eval-every 0 --log-every 1000 --steps 300 --run-dir "$WORK/nanaccum"
[ "$RC" = 4 ] && grep -qE "^dptrain: error: step [0-9]+: non-finite (loss|gradient) from a non-finite input \\(rank [01]: $WORK/nandata/train-00001-of-00004\\.h5 row 5, feature 3 = nan\\)" "$WORK/out" \
  || { cat "$WORK/out"; fail "NaN in the data with --grad-accum 4: want exit 4 and the row named"; }
echo "ok: NaN in the data, --grad-accum 4 -> the row named"

# --- a corrupt newest checkpoint: resume warns, moves it aside (a new checkpoint of its step must
# not overwrite it, nor the rotation keep it over good ones) and falls back to the previous one.
train 2 "${C[@]}" --steps 40 --checkpoint-every 10 --run-dir "$WORK/corrupt" --stop-after 20 --inject-fault 0:20:corrupt-checkpoint
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "corrupt: first run exited $RC"; }
bad=$WORK/corrupt/checkpoints/ckpt-00000020.h5
sum=$(sha256sum <"$bad")
train 2 "${C[@]}" --steps 40 --checkpoint-every 10 --run-dir "$WORK/corrupt" --resume auto
grep -q "warning: .*ckpt-00000020.h5: file checksum mismatch.*; moved aside to $bad.damaged; resuming from the older .*ckpt-00000010.h5" "$WORK/out" \
  && grep -q "resumed from .*ckpt-00000010.h5 at step 10" "$WORK/out" && [ "$RC" = 0 ] \
  || { cat "$WORK/out"; fail "corrupt: no fallback to step 10"; }
[ "$(sha256sum <"$bad.damaged")" = "$sum" ] && "$BIN/dptrain-ckpt" info "$bad" >/dev/null \
  || fail "corrupt: the damaged file was not kept aside, or step 20 was not written anew"
echo "ok: corrupt newest checkpoint -> moved aside to ckpt-00000020.h5.damaged, fell back to step 10"

# --- every checkpoint damaged: --resume auto refuses with one line naming each, and touches none
# (before, it started again at step 1 and rotated them away).
cp -r "$WORK/corrupt" "$WORK/allbad"
rm -f "$WORK"/allbad/checkpoints/*.damaged
for f in "$WORK"/allbad/checkpoints/ckpt-*.h5; do printf 'X' | dd of="$f" bs=1 seek=5000 conv=notrunc status=none; done
before=$(cd "$WORK/allbad/checkpoints" && sha256sum ckpt-*.h5)
n=$(ls "$WORK"/allbad/checkpoints/ckpt-*.h5 | wc -l)
train 2 "${C[@]}" --steps 60 --checkpoint-every 10 --run-dir "$WORK/allbad" --resume auto
[ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] \
  && grep -q "^dptrain: error: --resume auto: none of the $n checkpoints in $WORK/allbad/checkpoints is usable (.*ckpt-00000040.h5: .*ckpt-00000030.h5: .*); restore one" "$WORK/out" \
  || { cat "$WORK/out"; fail "all damaged: want exit 2 and one line naming each of the $n checkpoints"; }
[ "$(cd "$WORK/allbad/checkpoints" && sha256sum ckpt-*.h5)" = "$before" ] || fail "all damaged: the checkpoints were changed"
echo "ok: every checkpoint damaged -> $(grep '^dptrain: error:' "$WORK/out" | cut -c1-150)..."

# --- a roll-back: --resume PATH to an older checkpoint of the run's own directory moves the later
# ones aside (before, the rotation, which keeps the highest steps, deleted the roll-back's own
# checkpoints, and --resume auto went back to the abandoned branch).
train 1 "${C[@]}" --steps 30 --checkpoint-every 10 --keep-checkpoints 2 --run-dir "$WORK/back"
train 1 "${C[@]}" --steps 30 --checkpoint-every 10 --keep-checkpoints 2 --run-dir "$WORK/back" --stop-after 5 \
  --resume "$WORK/back/checkpoints/ckpt-00000020.h5"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "roll-back: exit $RC"; }
grep -q "^dptrain: warning: $WORK/back/checkpoints/ckpt-00000030.h5 is later than --resume .*ckpt-00000020.h5 (step 20); moved aside to $WORK/back/checkpoints/ckpt-00000030.h5.later-branch$" "$WORK/out" \
  || { cat "$WORK/out"; fail "roll-back: no line saying ckpt-00000030.h5 was moved aside"; }
[ "$(cd "$WORK/back/checkpoints" && ls | tr '\n' ' ')" = "ckpt-00000020.h5 ckpt-00000025.h5 ckpt-00000030.h5.later-branch " ] \
  || { ls -l "$WORK/back/checkpoints"; fail "roll-back: want steps 20 and 25, and 30 set aside"; }
train 1 "${C[@]}" --steps 30 --checkpoint-every 10 --keep-checkpoints 2 --run-dir "$WORK/back" --stop-after 1 --resume auto
grep -q "resumed from $WORK/back/checkpoints/ckpt-00000025.h5" "$WORK/out" || { cat "$WORK/out"; fail "roll-back: --resume auto did not continue it"; }
echo "ok: a roll-back with --resume PATH moved the later checkpoint aside; --resume auto continues the roll-back"

# --- --resume given the run's own directory, whose newest checkpoint is damaged: that one is skipped
# for the one before, and moved aside as damaged (it was filed as a "later branch").
train 1 "${C[@]}" --steps 30 --checkpoint-every 10 --run-dir "$WORK/rdir"
printf 'X' | dd of="$WORK/rdir/checkpoints/ckpt-00000030.h5" bs=1 seek=5000 conv=notrunc status=none
train 1 "${C[@]}" --steps 30 --checkpoint-every 10 --run-dir "$WORK/rdir" --stop-after 1 --resume "$WORK/rdir"
[ "$RC" = 0 ] && grep -q "^dptrain: skipping checkpoint: $WORK/rdir/checkpoints/ckpt-00000030.h5: .*; using the older $WORK/rdir/checkpoints/ckpt-00000020.h5$" "$WORK/out" \
  && grep -q "^dptrain: warning: $WORK/rdir/checkpoints/ckpt-00000030.h5 does not verify (above); moved aside to $WORK/rdir/checkpoints/ckpt-00000030.h5.damaged$" "$WORK/out" \
  && ! grep -q later-branch "$WORK/out" \
  || { cat "$WORK/out"; fail "--resume RUN_DIR with a damaged newest: want it skipped and moved aside as damaged"; }
echo "ok: --resume RUN_DIR skips a damaged newest checkpoint and moves it aside as damaged"

# --- one run at a time per checkpoint directory: a second run waits for the first (--lock-wait)
# and then refuses, naming it; once the holder is gone (killed hard, as a requeued job's orphans
# are), the next run takes over. A holder that ends within --lock-wait is waited for.
run="$WORK/locked"
( set +e; timeout -k 5 120 $MPIRUN -np 2 "$BIN/dptrain" "${C[@]}" --steps 400000 --checkpoint-every 1000 --run-dir "$run" \
    >"$WORK/first.out" 2>&1 ) &
for _ in $(seq 300); do grep -q '"type":"step"' "$run/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
train 2 "${C[@]}" --steps 400000 --run-dir "$run" --resume auto --lock-wait 1
[ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] \
  && grep -q "^dptrain: error: --checkpoint-dir $run/checkpoints is in use by another dptrain (pid [0-9]* on $(hostname), for [0-9]* s); waited 1 s (--lock-wait)" "$WORK/out" \
  || { cat "$WORK/out"; fail "lock: a second run on the same --run-dir was not refused naming the first"; }
# The same --run-dir with another --checkpoint-dir: refused on the run directory's lock (it truncated
# the first run's metrics.jsonl, which then held NUL bytes and both runs' records).
lines_before=$(wc -l <"$run/metrics.jsonl")
train 2 "${C[@]}" --steps 400000 --run-dir "$run" --checkpoint-dir "$WORK/other-ckpts" --lock-wait 1
[ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] \
  && grep -q "^dptrain: error: --run-dir $run is in use by another dptrain (pid [0-9]* on $(hostname), for [0-9]* s); waited 1 s (--lock-wait)" "$WORK/out" \
  && [ "$(wc -l <"$run/metrics.jsonl")" -ge "$lines_before" ] && [ "$(tr -cd '\000' <"$run/metrics.jsonl" | wc -c)" = 0 ] \
  || { cat "$WORK/out"; fail "lock: a second run on the same --run-dir with another --checkpoint-dir was not refused"; }
for p in $(pgrep -f -- "--run-dir $run( |\$)"); do [ "$(ps -o comm= -p "$p")" = dptrain ] && { kill -9 "$p" 2>/dev/null || true; }; done
wait
# A holder that ends while the next run waits: held (flock -o: by flock alone, not its command)
# until that run says it waits, then released.
flock -o "$run/checkpoints/.lock" sleep 120 &
holder=$!
for _ in $(seq 100); do flock -n "$run/checkpoints/.lock" true || break; sleep 0.1; done
( set +e; timeout -k 5 120 $MPIRUN -np 2 "$BIN/dptrain" "${C[@]}" --steps 400000 --stop-after 20 --run-dir "$run" --resume auto --lock-wait 60 \
    >"$WORK/out" 2>&1; echo $? >"$WORK/rc" ) &
for _ in $(seq 600); do grep -q "waiting up to 60 s" "$WORK/out" 2>/dev/null && break; sleep 0.1; done
pkill -P "$holder" sleep || true
kill "$holder" 2>/dev/null || true  # it may have ended with its sleep already
wait
[ "$(cat "$WORK/rc")" = 0 ] \
  && grep -q "^dptrain: --checkpoint-dir $run/checkpoints is in use by another dptrain (.*): waiting up to 60 s" "$WORK/out" \
  && grep -q "^done: steps " "$WORK/out" \
  || { cat "$WORK/out"; fail "lock: a run did not wait for a holder that ended within --lock-wait, then train"; }
echo "ok: one run per checkpoint and run directory: a second one refused after --lock-wait, a short-lived holder waited for"

# --- a stop signal during an evaluation: the ranks agree before each evaluation batch, so the stop
# cuts it short and checkpoints the step; it used to wait for the whole evaluation (here about
# 10 s: 100,000 validation rows through a 4.3M-parameter MLP), which could outlast the launcher's
# grace and lose the checkpoint to SIGKILL.
synth "$WORK/bigval" --train-samples 4000 --val-samples 100000
erun="$WORK/eval-stop"
( set +e; timeout -k 5 120 $MPIRUN -np 2 "$BIN/dptrain" --data "$WORK/bigval" --batch-size 8 --hidden 2048,2048 \
    --log-every 20 --eval-every 20 --steps 400000 --run-dir "$erun" >"$WORK/ev.out" 2>&1; echo $? >"$WORK/ev.rc" ) &
for _ in $(seq 600); do grep -q '^step  *20/' "$WORK/ev.out" 2>/dev/null && break; sleep 0.1; done
sleep 0.5  # into the evaluation
for p in $(pgrep -f -- "--run-dir $erun( |\$)"); do [ "$(ps -o comm= -p "$p")" = dptrain ] && { kill -TERM "$p" 2>/dev/null || true; break; }; done
wait
[ "$(cat "$WORK/ev.rc")" = 75 ] && grep -q "^stop: the evaluation at step 20 cut short by SIGTERM; checkpoint of step 20" "$WORK/ev.out" \
  && ! grep -q "^eval at step 20" "$WORK/ev.out" && [ "$(cat "$erun/stopped-by")" = SIGTERM ] \
  && "$BIN/dptrain-ckpt" info "$erun/checkpoints/ckpt-00000020.h5" >/dev/null \
  || { cat "$WORK/ev.out"; fail "SIGTERM during an evaluation: want it cut short, a checkpoint of step 20 and exit 75"; }
echo "ok: SIGTERM during an evaluation -> cut short, checkpoint of step 20, exit 75"

# --- a stop signal during set-up (here: while waiting for the lock) ends every rank with exit 75
# and the requeue line, at once (before, SIGUSR1 killed the ranks: exit 138, no requeue). A SIGTERM
# right after the notice (Slurm's time limit, come while the notice's stop is under way) keeps it a
# preemption (the later signal once replaced it: SIGTERM in stopped-by, and no requeue).
flock -o "$run/checkpoints/.lock" sleep 120 &
holder=$!
for _ in $(seq 100); do flock -n "$run/checkpoints/.lock" true || break; sleep 0.1; done
( set +e; timeout -k 5 120 $MPIRUN -np 2 "$BIN/dptrain" "${C[@]}" --steps 400000 --run-dir "$run" --resume auto --lock-wait 100 \
    >"$WORK/out" 2>&1; echo $? >"$WORK/rc" ) &
for _ in $(seq 600); do grep -q "waiting up to 100 s" "$WORK/out" 2>/dev/null && break; sleep 0.1; done
t0=$SECONDS
for p in $(pgrep -f -- "--run-dir $run( |\$)"); do
  [ "$(ps -o comm= -p "$p")" = dptrain ] && { kill -USR1 "$p" 2>/dev/null && kill -TERM "$p" 2>/dev/null || true; break; }
done
while [ ! -s "$WORK/rc" ] && [ $((SECONDS - t0)) -lt 60 ]; do sleep 0.2; done
pkill -P "$holder" sleep || true
kill "$holder" 2>/dev/null || true
wait
[ "$(cat "$WORK/rc")" = 75 ] && [ $((SECONDS - t0)) -lt 30 ] \
  && grep -q "^preempted: a rank received SIGUSR1 (a preemption notice) during set-up, before any step" "$WORK/out" \
  && grep -q "^exit 75: requeue the job with --resume auto to continue" "$WORK/out" \
  || { cat "$WORK/out"; fail "SIGUSR1 during set-up: want exit 75 at once and the requeue line, got $(cat "$WORK/rc")"; }
# The batch scripts requeue by RUN_DIR/stopped-by, as after a stop in training; and a stop is no error.
[ "$(cat "$run/stopped-by" 2>/dev/null)" = SIGUSR1 ] || fail "SIGUSR1 during set-up: RUN_DIR/stopped-by is not SIGUSR1"
! grep -q "error:" "$WORK/out" || { cat "$WORK/out"; fail "SIGUSR1 during set-up: the stop is said as an error"; }
echo "ok: SIGUSR1 then SIGTERM during set-up (the lock wait) -> exit 75 after $((SECONDS - t0)) s, a preemption"

# --- a stop during the long set-up of a large model (191M parameters: their initialization takes
# seconds on any CPU, and the optimizer's allocation of 1.5 GB more): exit 75 within 5 s of the
# signal (it waited for both: 9-10 s on a 2-core EPYC, 18-38 s at 201M where it was first seen,
# past a launcher's 30 s grace).
/usr/bin/python3 "$ROOT/tests/integration/make_text.py" 20000 >"$WORK/big.txt"
"$BIN/dptrain-data" text --input "$WORK/big.txt" --out "$WORK/bigtok" --tokenizer char >/dev/null
brun="$WORK/big-setup"
rm -f "$WORK/rc"
( set +e; timeout -k 5 120 $MPIRUN -np 1 "$BIN/dptrain" --model gpt --data "$WORK/bigtok" --n-layer 12 --n-embd 1152 \
    --n-head 12 --block-size 64 --batch-size 1 --steps 10 --eval-every 0 --run-dir "$brun" >"$WORK/out" 2>&1
  echo $? >"$WORK/rc" ) &
rank=
for _ in $(seq 100); do
  for p in $(pgrep -f -- "--run-dir $brun( |\$)"); do [ "$(ps -o comm= -p "$p")" = dptrain ] && rank=$p; done
  [ -n "$rank" ] && break
  sleep 0.1
done
[ -n "$rank" ] || fail "the large model's rank did not start"
sleep 1.5
t0=$(date +%s%N)
kill -TERM "$rank"
while [ ! -s "$WORK/rc" ] && [ $(( ($(date +%s%N) - t0) / 1000000000 )) -lt 60 ]; do sleep 0.05; done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
wait
[ "$(cat "$WORK/rc")" = 75 ] && [ "$ms" -lt 5000 ] \
  && grep -q "^stopped: a rank received SIGTERM .* during set-up, before any step" "$WORK/out" \
  || { cat "$WORK/out"; fail "SIGTERM 1.5 s into a 191M-parameter model's set-up: exit $(cat "$WORK/rc") after $ms ms, want 75 within 5 s"; }
echo "ok: SIGTERM 1.5 s into a 191M-parameter model's set-up -> exit 75 after $ms ms"

# --- a shard that never answers (a FIFO, as a hung filesystem would): the watchdog watches set-up
# too (--step-timeout + --lock-wait), names it and ends the job (before: it waited forever).
cp -r "$WORK/data" "$WORK/fifo"
last=$(ls "$WORK"/fifo/train-*.h5 | tail -n1)
rm "$last" && mkfifo "$last"
t0=$SECONDS
train 2 --data "$WORK/fifo" --batch-size 8 --eval-every 0 --steps 30 --run-dir "$WORK/fifo-run" --step-timeout 2 --lock-wait 1
[ "$RC" = 1 ] && grep -q "^dptrain: error: set-up stuck for [0-9.]* s (--step-timeout 2 + --lock-wait 1): a file, device or peer that does not answer" "$WORK/out" \
  || { cat "$WORK/out"; fail "a shard that never answers: want the watchdog's set-up line and exit 1, got $RC"; }
echo "ok: a shard that never answers -> the watchdog ends set-up after $((SECONDS - t0)) s"
# A checkpoint that never answers (the newest a FIFO) holds rank 0 alone in set-up, reading it: the
# line names rank 0, once; the ranks waiting for it wait a grace longer (each printed a line of
# its own, the first from whichever rank's watchdog woke first).
train 4 "${C[@]}" --steps 20 --checkpoint-every 10 --run-dir "$WORK/ckfifo"
rm "$WORK/ckfifo/checkpoints/ckpt-00000020.h5" && mkfifo "$WORK/ckfifo/checkpoints/ckpt-00000030.h5"
train 4 "${C[@]}" --steps 40 --run-dir "$WORK/ckfifo" --resume auto --step-timeout 2 --lock-wait 1
[ "$RC" != 0 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] \
  && grep -q "^dptrain: error: set-up stuck for [0-9.]* s (--step-timeout 2 + --lock-wait 1): .*(rank 0 on " "$WORK/out" \
  || { cat "$WORK/out"; fail "a checkpoint that never answers: want one line, rank 0's"; }
echo "ok: a checkpoint that never answers -> one line, rank 0's"
# The same under --preflight, whose checks read the shards before set-up: they were unwatched (and
# a stop signal then killed the ranks: exit 138), and the job waited forever.
t0=$SECONDS
train 2 --data "$WORK/fifo" --batch-size 8 --eval-every 0 --steps 30 --run-dir "$WORK/fifo-run" --step-timeout 2 \
  --lock-wait 1 --preflight
[ "$RC" = 1 ] && grep -q "^dptrain: error: set-up stuck for [0-9.]* s (--step-timeout 2 + --lock-wait 1)" "$WORK/out" \
  || { cat "$WORK/out"; fail "--preflight on a shard that never answers: want the watchdog's line and exit 1, got $RC"; }
echo "ok: --preflight on a shard that never answers -> the watchdog ends it after $((SECONDS - t0)) s"

# --- an I/O error while reading: one line, every rank ends.
train 2 "${C[@]}" --steps 30 --run-dir "$WORK/io" --inject-fault 1:15:io-error
[ "$RC" != 0 ] && grep -q "^dptrain: error: .*injected I/O error (--inject-fault) for step 15 (rank 1 on" "$WORK/out" \
  || { cat "$WORK/out"; fail "io-error"; }
echo "ok: I/O error -> exit $RC"

# --- async checkpoints: the same files as synchronous ones.
train 2 "${C[@]}" --steps 30 --checkpoint-every 10 --keep-checkpoints 5 --run-dir "$WORK/sync"
train 2 "${C[@]}" --steps 30 --checkpoint-every 10 --keep-checkpoints 5 --run-dir "$WORK/async" --async-checkpoint
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "async exited $RC"; }
for s in 10 20 30; do
  "$BIN/dptrain-ckpt" diff "$WORK/sync/checkpoints/ckpt-000000$s.h5" "$WORK/async/checkpoints/ckpt-000000$s.h5" >/dev/null \
    || fail "async checkpoint at step $s differs from the synchronous one"
done
echo "ok: async checkpoints identical to synchronous ones"

# --- the other ranks' wait for rank 0's checkpoint is not communication: rank 0's checkpoint of
# step 100 takes 3 s longer; the other rank waits for it in a checkpoint-wait phase, left out
# of the step's phases, and not in step 101's all-reduce (which made 120 ms a step of the 25-step
# interval after it, a "comm 95%" step line and a network warning). The slowest rank's all-reduce
# over steps 101-125, from the step record: well under those 120 ms (on a busy machine, noise
# reached 7).
train 2 "${C[@]}" --steps 125 --log-every 25 --checkpoint-every 100 --run-dir "$WORK/ckwait" --inject-fault 0:100:slow-checkpoint
ar=$(grep '"type":"step"' "$WORK/ckwait/metrics.jsonl" | tail -n1 | sed -n 's/.*"allreduce":{[^}]*"max_ms":\([0-9.e+-]*\).*/\1/p')
[ "$RC" = 0 ] && [ -n "$ar" ] && awk -v a="$ar" 'BEGIN { exit !(a < 40) }' \
  || { cat "$WORK/out"; fail "slow checkpoint: steps 101-125 show ${ar:-?} ms of all-reduce a step on the slowest rank, want < 40"; }
echo "ok: a 3 s checkpoint write -> $ar ms of all-reduce a step in the next interval (the wait is its own phase)"
# The end-of-run breakdown shows the write and the wait as rows of their own, and the run record
# keeps the longest wait (rank 1's, at least the injected 3 s).
grep -q '^  ckpt-wait .*longest: rank 1, [3-9]\.[0-9]* s in all' "$WORK/out" \
  || { cat "$WORK/out"; fail "slow checkpoint: no ckpt-wait row of 3 s or more in the end-of-run breakdown"; }
wait_ms=$(grep '"type":"summary"' "$WORK/ckwait/metrics.jsonl" | sed -n 's/.*"wait_max_ms":\([0-9.e+-]*\).*/\1/p')
awk -v w="${wait_ms:-0}" 'BEGIN { exit !(w >= 2900) }' || fail "slow checkpoint: the run record's wait_max_ms is ${wait_ms:-absent}"
echo "ok: the breakdown's checkpoint rows: $(grep '^  ckpt' "$WORK/out" | tr -s ' ' | tr '\n' ';')"
# After its first checkpoint the run says what a stop signal needs (the measured write and two steps).
# (3 s and more: a busy disk's fsync adds to the injected 3 s.)
grep -q "^stop budget: a checkpoint takes [3-9]\.[0-9]* s to write and a step [0-9.]* ms, so a stop signal (SIGTERM, SIGUSR1) needs up to [3-9]\.[0-9] s" "$WORK/out" \
  && grep -q '"type":"stop_budget".*"stop_needs_s":[3-9]\.' "$WORK/ckwait/metrics.jsonl" \
  || { cat "$WORK/out"; fail "slow checkpoint: no stop budget of about 3 s"; }
echo "ok: $(grep '^stop budget:' "$WORK/out")"

# --- a full disk during a checkpoint (a small tmpfs): an error naming it, the previous checkpoint
# intact, no temporary file left. Needs root to mount.
if [ "$(id -u)" = 0 ] && mkdir -p "$WORK/small" && mount -t tmpfs -o size=1200k tmpfs "$WORK/small" 2>/dev/null; then
  trap 'umount "$WORK/small" 2>/dev/null || true; rm -rf "$WORK"' EXIT
  # One checkpoint of this model is 0.92 MB (76,810 parameters x 3 floats): one fits in 1200 KiB,
  # two do not.
  train 2 "${C[@]}" --steps 30 --checkpoint-every 10 --keep-checkpoints 3 --checkpoint-dir "$WORK/small" \
    --run-dir "$WORK/full"
  [ "$RC" != 0 ] && grep -q "^dptrain: error: checkpoint .*ckpt-00000020.h5: .*the previous checkpoints are intact" "$WORK/out" \
    || { cat "$WORK/out"; fail "full disk: want an error at the second checkpoint"; }
  "$BIN/dptrain-ckpt" info "$WORK/small/ckpt-00000010.h5" >/dev/null || fail "full disk: the previous checkpoint is damaged"
  ! ls -a "$WORK/small" | matches '\.tmp$' || fail "full disk: a temporary file was left"
  echo "ok: full disk -> $(grep '^dptrain: error' "$WORK/out" | cut -c1-160)"
else
  echo "SKIPPED full-disk case: needs root and a tmpfs mount"
fi

# --- the checkpoint directory's filesystem turns read-only mid-run (a bind mount remounted
# read-only, in a mount namespace of its own): the error gives the system's reason, where it said
# only "check the directory exists and is writable".
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  mkdir -p "$WORK/rock"
  cat >"$WORK/ro.sh" <<'SH'
dir=$1; shift
"$@" &
p=$!
for _ in $(seq 300); do ls "$dir"/ckpt-*.h5 >/dev/null 2>&1 && break; sleep 0.1; done
mount --bind "$dir" "$dir" && mount -o remount,bind,ro "$dir" || { kill $p; echo "remount failed"; exit 99; }
wait $p
SH
  set +e
  timeout -k 5 120 unshare -m bash "$WORK/ro.sh" "$WORK/rock" $MPIRUN -np 2 "$BIN/dptrain" "${C[@]}" --steps 100000 \
    --checkpoint-every 200 --checkpoint-dir "$WORK/rock" --run-dir "$WORK/rorun" >"$WORK/out" 2>&1
  RC=$?
  set -e
  [ "$RC" = 2 ] && grep -q "^dptrain: error: checkpoint .*: cannot create the file (Read-only file system).*the previous checkpoints are intact" "$WORK/out" \
    || { cat "$WORK/out"; fail "read-only checkpoint filesystem mid-run: want exit 2 and 'Read-only file system' (exit $RC)"; }
  echo "ok: read-only filesystem mid-run -> $(grep '^dptrain: error' "$WORK/out" | cut -c1-170)"
else
  echo "SKIPPED read-only filesystem mid-run: needs root and a mount namespace (unshare -m)"
fi
