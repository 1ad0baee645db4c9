#!/usr/bin/env bash
# A stop request sent to the launcher, not to a rank: scripts/dptrain-run turns SIGTERM or SIGINT
# to itself (Kubernetes' SIGTERM to a pod's first process, a scheduler's to the job's launcher)
# into SIGUSR1 to mpirun, which forwards it to the ranks: they checkpoint and exit 75, and so does
# dptrain-run, also when the checkpoint takes seconds (--inject-fault slow-checkpoint: 3 s longer).
# The same for a terminal's ^C and hang-up sent to the whole process group, and with the output
# piped into a reader that closes at once; a rank's own SIGHUP is a SIGTERM. The same through
# eks/entrypoint.sh, as the image runs it; and a worker pod's entry point, which passes SIGTERM on
# to its ranks.
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 4000 --val-samples 256
C=(--data "$WORK/data" --batch-size 8 --eval-every 0 --log-every 1000 --steps 10000000 --checkpoint-every 10000000)
# Steps enough that no machine ends the run before the stop: every run here ends by the signal
# (100000 steps, 22 s on a fast machine, once ended before a signal that a loaded one sent late).
# A grace no other process sleeps for, so that its backstop's sleep can be looked for afterwards
# (in this test's session).
export DPTRAIN_STOP_GRACE=297

# stop_launcher SIG RUN CMD...: starts CMD, sends SIG to it (with GROUP=1 to its whole process
# group, as a terminal sends ^C or a hang-up) once the run has trained, and leaves
# its exit status in $RC, its output in $WORK/out, the seconds from the signal to its end in $T, and
# in $WHEN when the first step record showed and the signal went, counted from the start.
stop_launcher() {
  local sig=$1 run=$2 pid t0 start=$SECONDS seen; shift 2
  if [ "${GROUP:-0}" = 1 ]; then setsid "$@" >"$WORK/out" 2>&1 & else "$@" >"$WORK/out" 2>&1 & fi
  pid=$!
  for _ in $(seq 300); do grep -q '"type":"step"' "$run/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
  grep -q '"type":"step"' "$run/metrics.jsonl" 2>/dev/null || { kill -9 "$pid"; cat "$WORK/out"; fail "$run: no step within 30 s"; }
  seen=$((SECONDS - start))
  sleep 0.5
  t0=$SECONDS
  WHEN="first step record after $seen s, the signal after $((t0 - start)) s"
  if [ "${GROUP:-0}" = 1 ]; then kill -"$sig" -- -"$pid"; else kill -"$sig" "$pid"; fi
  set +e
  wait "$pid"
  RC=$?
  set -e
  T=$((SECONDS - t0))
}
# stopped RUN WHAT: exit 75 with the preemption lines and a valid checkpoint of the step it names.
stopped() {
  local at
  [ "$RC" = 75 ] || { cat "$WORK/out"; fail "$2: exit $RC, want 75 ($WHEN)"; }
  grep -q "^exit 75: requeue the job with --resume auto to continue" "$WORK/out" || { cat "$WORK/out"; fail "$2: no exit-75 line"; }
  at=$(sed -n 's/.*stopped after step \([0-9]*\) with a checkpoint.*/\1/p' "$WORK/out")
  [ -n "$at" ] || { cat "$WORK/out"; fail "$2: no 'stopped after step N' line"; }
  "$BIN/dptrain-ckpt" info "$(printf '%s/checkpoints/ckpt-%08d.h5' "$1" "$at")" >/dev/null || fail "$2: no valid checkpoint of step $at"
  for _ in $(seq 20); do pgrep -s 0 -fx "sleep $DPTRAIN_STOP_GRACE" >/dev/null || break; sleep 0.1; done
  pgrep -s 0 -fx "sleep $DPTRAIN_STOP_GRACE" >/dev/null && fail "$2: the launcher's backstop (sleep $DPTRAIN_STOP_GRACE) outlived it"
  echo "ok: $2 -> exit 75 after $T s, checkpoint of step $at"
}

# shellcheck disable=SC2086  # MPIRUN is a command with its options
stop_launcher TERM "$WORK/term" "$ROOT/scripts/dptrain-run" $MPIRUN -np 2 "$BIN/dptrain" "${C[@]}" --run-dir "$WORK/term" \
  --inject-fault 0:1:slow-checkpoint
stopped "$WORK/term" "SIGTERM to dptrain-run mpirun, a checkpoint of 3 s"
[ "$T" -ge 3 ] || fail "the checkpoint took $T s, want the injected 3 s at least"
grep -q "^dptrain-run: SIGTERM: asking the ranks to checkpoint and stop" "$WORK/out" || fail "dptrain-run did not say what it did"

# A background job of a script starts with SIGINT ignored, which no trap can undo: restore it first,
# as a terminal's foreground job has it.
# shellcheck disable=SC2086
stop_launcher INT "$WORK/int" /usr/bin/python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
  "$ROOT/scripts/dptrain-run" $MPIRUN -np 2 "$BIN/dptrain" "${C[@]}" --run-dir "$WORK/int"
stopped "$WORK/int" "SIGINT to dptrain-run mpirun"

# ^C at a terminal: SIGINT to the whole foreground group, dptrain-run and everything it started.
# The launcher, in a session of its own, hears of it only as dptrain-run's SIGUSR1 (mpirun that
# took the SIGINT itself killed the ranks a second into their checkpoint: exit 1, no checkpoint).
# shellcheck disable=SC2086
GROUP=1 stop_launcher INT "$WORK/ctrlc" /usr/bin/python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
  "$ROOT/scripts/dptrain-run" $MPIRUN -np 2 "$BIN/dptrain" "${C[@]}" --run-dir "$WORK/ctrlc" --inject-fault 0:1:slow-checkpoint
stopped "$WORK/ctrlc" "^C (SIGINT to the terminal's process group) under dptrain-run, a checkpoint of 3 s"

# A hang-up (an ssh session lost, a terminal closed): SIGHUP to the group is a stop with a
# checkpoint, not the end of dptrain-run (129) and of the ranks.
# shellcheck disable=SC2086
GROUP=1 stop_launcher HUP "$WORK/hup" "$ROOT/scripts/dptrain-run" $MPIRUN -np 2 "$BIN/dptrain" "${C[@]}" --run-dir "$WORK/hup"
stopped "$WORK/hup" "SIGHUP to dptrain-run's process group"

# A closed output (`| head`, a log shipper that died): the launcher writes on into the relay and
# dptrain-run's log, and a later stop still checkpoints; the log has the run's last lines.
# shellcheck disable=SC2086
{ "$ROOT/scripts/dptrain-run" $MPIRUN -np 2 "$BIN/dptrain" "${C[@]}" --run-dir "$WORK/pipe" --log-every 1 2>&1 \
    | head -c 1 >/dev/null; } &
for _ in $(seq 300); do grep -q '"type":"step"' "$WORK/pipe/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
sleep 1
runner=$(pgrep -s 0 -f "dptrain-run $MPIRUN -np 2 $BIN/dptrain .*--run-dir $WORK/pipe" | head -n1)
[ -n "$runner" ] || { cat "$WORK/pipe/dptrain-run.log" 2>/dev/null | tail; fail "closed output: dptrain-run is gone before any stop"; }
kill -TERM "$runner"
wait
at=$(sed -n 's/.*stopped after step \([0-9]*\) with a checkpoint.*/\1/p' "$WORK/pipe/dptrain-run.log")
grep -q "^exit 75: " "$WORK/pipe/dptrain-run.log" && [ -n "$at" ] \
  && "$BIN/dptrain-ckpt" info "$(printf '%s/checkpoints/ckpt-%08d.h5' "$WORK/pipe" "$at")" >/dev/null \
  || { tail "$WORK/pipe/dptrain-run.log"; fail "a closed output pipe: no checkpoint and exit 75 after the stop"; }
echo "ok: output piped into head -c 1 (closed at once) -> the run went on; SIGTERM -> checkpoint of step $at, exit 75 in dptrain-run.log"

# The ranks themselves take SIGHUP as SIGTERM: a checkpoint and exit 75.
stop_launcher HUP "$WORK/rank-hup" "$BIN/dptrain" "${C[@]}" --run-dir "$WORK/rank-hup"
[ "$RC" = 75 ] && grep -q "^stopped: a rank received SIGTERM .*SIGHUP, a lost terminal" "$WORK/out" \
  || { cat "$WORK/out"; fail "SIGHUP to a rank: exit $RC, want 75 with the stop's line"; }
echo "ok: SIGHUP to a rank -> checkpoint, exit 75"

# The image's entry point runs its arguments under dptrain-run (installed on the PATH there).
# shellcheck disable=SC2086
PATH=$ROOT/scripts:$PATH stop_launcher TERM "$WORK/eks" "$ROOT/eks/entrypoint.sh" $MPIRUN -np 2 "$BIN/dptrain" "${C[@]}" \
  --run-dir "$WORK/eks"
stopped "$WORK/eks" "SIGTERM to eks/entrypoint.sh mpirun"

# A worker pod's SIGTERM (deleted, drained, its node reclaimed) reaches only its PID 1, the
# entry point without arguments, whose end kills the container's other processes: it must pass
# SIGTERM on to the ranks and wait for their checkpoint. In a PID namespace of its own (as in a
# container: it then sees only its ranks), with the job started in place of sshd (SSHD).
if unshare --pid --fork --mount-proc true 2>/dev/null; then
  # shellcheck disable=SC2086
  SSHD="$MPIRUN -np 2 $BIN/dptrain ${C[*]} --run-dir $WORK/worker" DPTRAIN_STOP_GRACE=60 \
    unshare --pid --fork --mount-proc "$ROOT/eks/entrypoint.sh" >"$WORK/out" 2>&1 &
  for _ in $(seq 300); do grep -q '"type":"step"' "$WORK/worker/metrics.jsonl" 2>/dev/null && break; sleep 0.1; done
  init=""
  for p in $(pgrep -s 0 -x entrypoint.sh); do grep -q "eks/entrypoint.sh" "/proc/$p/cmdline" && init=$p; done
  [ -n "$init" ] || { cat "$WORK/out"; fail "the worker entry point is not running"; }
  kill -TERM "$init"
  wait
  at=$(sed -n 's/.*stopped after step \([0-9]*\) with a checkpoint.*/\1/p' "$WORK/out")
  grep -q "^entrypoint: SIGTERM: passed on to the ranks" "$WORK/out" && [ -n "$at" ] \
    && "$BIN/dptrain-ckpt" info "$(printf '%s/checkpoints/ckpt-%08d.h5' "$WORK/worker" "$at")" >/dev/null \
    || { cat "$WORK/out"; fail "SIGTERM to a worker's entry point: the ranks did not checkpoint"; }
  echo "ok: SIGTERM to a worker pod's entry point -> its ranks checkpoint (step $at) before it ends"
else
  echo "SKIPPED the worker entry point's SIGTERM: no PID namespace here (unshare --pid needs root)"
fi

# Without a stop request the launcher's status passes through, and dptrain-run refuses no arguments.
"$ROOT/scripts/dptrain-run" bash -c 'exit 3' && fail "dptrain-run hid a failure" || [ $? = 3 ] || fail "dptrain-run changed the status 3"
"$ROOT/scripts/dptrain-run" >/dev/null 2>&1 && fail "dptrain-run without a command succeeded" || true
echo "ok: dptrain-run passes the launcher's status through"
