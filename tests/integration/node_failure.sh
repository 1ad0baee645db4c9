#!/usr/bin/env bash
# Losing a whole node of an emulated 2-node cluster (tests/cluster/up), mid-run, after a
# checkpoint:
# - every rank of node 1 killed: the job ends non-zero within seconds and the launcher's line
#   names the lost node's address; the last checkpoint is intact; training resumes on the
#   remaining node (2 ranks instead of 4, the same global batch) and finishes;
# - node 1's link taken down: the ranks left waiting print one line naming the phase and what
#   node 1's heartbeat says (alive, waiting in the same all-reduce: the network failed), and the
#   job ends non-zero once mpirun's keepalive gives node 1 up (6 to 11 s, tests/cluster/up).
source "$(dirname "$0")/lib.bash"
p=dptn
cluster_up 2 2 $p
addr1=$(awk -v h=$p-node1 '$2 == h { print $1 }' "$DPT_CLUSTER_DIR/hosts")
synth "$WORK/data" --train-samples 4000 --val-samples 256

# start RUN_DIR: trains on 2 nodes x 2 ranks in the background until stopped; waits for step 100's
# checkpoint. The job's output goes to RUN_DIR.out, its exit code to RUN_DIR.rc.
start() {
  local run=$1
  ( set +e; timeout -k 5 100 $CMPI -np 4 "$BIN/dptrain" --data "$WORK/data" --steps 100000 --batch-size 8 \
      --log-every 1000 --checkpoint-every 50 --eval-every 0 --run-dir "$run" --step-timeout 3 >"$run.out" 2>&1
    echo $? >"$run.rc" ) &
  JOB=$!
  for _ in $(seq 200); do [ -e "$run/checkpoints/ckpt-00000100.h5" ] && return 0; sleep 0.2; done
  cat "$run.out"; fail "no checkpoint of step 100 within 40 s"
}
# finish: waits for the job; sets RC and SECS (seconds since the fault).
finish() {
  local t0=$1
  wait "$JOB" || true
  RC=$(cat "$2.rc")
  SECS=$(( $(date +%s) - t0 ))
}

# --- every rank of node 1 killed
start "$WORK/kill"
t0=$(date +%s)
for pid in $(ip netns pids $p-node1); do [ "$(cat /proc/$pid/comm 2>/dev/null)" = dptrain ] && { kill -9 "$pid" 2>/dev/null || true; }; done
finish "$t0" "$WORK/kill"
[ "$RC" != 0 ] && [ "$RC" != 124 ] || { cat "$WORK/kill.out"; fail "node killed: want a non-zero exit before the time limit, got $RC"; }
[ "$SECS" -le 15 ] || fail "node killed: the job took $SECS s to end"
grep -q "exited on signal 9" "$WORK/kill.out" && grep -q "on node $addr1" "$WORK/kill.out" \
  || { cat "$WORK/kill.out"; fail "node killed: no line naming the lost node ($addr1)"; }
last=$(ls "$WORK/kill/checkpoints" | sort | tail -n1)
"$BIN/dptrain-ckpt" info "$WORK/kill/checkpoints/$last" >/dev/null || fail "node killed: the last checkpoint $last is damaged"
at=$((10#$(sed 's/ckpt-0*\([0-9]*\)\.h5/\1/' <<<"$last")))
echo "ok: node 1 killed: exit $RC after $SECS s, the launcher names $addr1, checkpoint $last intact"

# Resume on the remaining node: 2 ranks, batch 16 each, the global batch of 32 kept.
train 2 --data "$WORK/data" --steps $((at + 30)) --batch-size 16 --log-every 10 --checkpoint-every 50 --eval-every 0 \
  --run-dir "$WORK/kill" --resume auto
[ "$RC" = 0 ] && grep -q "resumed from .*$last at step $at" "$WORK/out" && grep -q "^done: steps $((at + 1))\.\.$((at + 30)) " "$WORK/out" \
  || { cat "$WORK/out"; fail "resume on the remaining node failed"; }
echo "ok: resumed on 1 node x 2 ranks at step $at and finished step $((at + 30))"

# --- node 1's link down
start "$WORK/link"
t0=$(date +%s)
ip netns exec $p-node1 ip link set eth0 down
finish "$t0" "$WORK/link"
ip netns exec $p-node1 ip link set eth0 up
[ "$RC" != 0 ] && [ "$RC" != 124 ] || { cat "$WORK/link.out"; fail "link down: want a non-zero exit before the time limit, got $RC"; }
[ "$SECS" -le 20 ] || fail "link down: the job took $SECS s to end"
grep -q "^dptrain: error: step [0-9]* stuck in all-reduce for .*$p-node1 alive and also waiting in all-reduce of step [0-9]*: the network between the nodes failed (rank [01] on $p-node0)" "$WORK/link.out" \
  || { cat "$WORK/link.out"; fail "link down: no line naming the phase and node 1's state"; }
last=$(ls "$WORK/link/checkpoints" | sort | tail -n1)
"$BIN/dptrain-ckpt" info "$WORK/link/checkpoints/$last" >/dev/null || fail "link down: the last checkpoint $last is damaged"
echo "ok: node 1's link down: exit $RC after $SECS s; $(grep -m1 '^dptrain: error:' "$WORK/link.out" | cut -c1-160)..."
