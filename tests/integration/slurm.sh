#!/usr/bin/env bash
# The sbatch scripts of slurm/ under a real Slurm: a private munged and a single-node slurmctld +
# slurmd (Debian's packages, from scripts/install-deps) run from a scratch directory with their
# own ports and munge socket. Job 0: slurm/README.md's first command, as written, in a fresh copy of
# the checkout. Job 1: single-node.sbatch trains 2 ranks under srun --mpi=pmix and
# checkpoints. Job 2: it is preempted with SIGUSR1 to its tasks (what --signal=USR1@120 sends):
# dptrain checkpoints and exits 75, the script requeues the job, and the next run resumes from the
# checkpoint and finishes. Jobs 3-5: multi-node.sbatch on one node with staging to local disk,
# stage-data.sbatch reusing that copy, allreduce-bench.sbatch writing its JSON. Job 6:
# single-node.sbatch as `make install` puts it, run from an empty directory.
source "$(dirname "$0")/lib.bash"

skip() { echo "SKIPPED slurm: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root (to run munged and slurmd)"
for c in munged slurmctld slurmd sbatch squeue scontrol scancel srun; do
  command -v "$c" >/dev/null || skip "$c not installed (make deps installs slurmctld, slurmd, slurm-client, munge)"
done
id munge >/dev/null 2>&1 || skip "no munge user"

host=$(hostname)
S=$WORK/slurm
M=$WORK/munge
mkdir -p "$S/state" "$S/spool" "$S/log" "$S/tmp" "$M"
chmod 755 "$WORK"   # munged checks every directory above its socket and key

# --- cancel the jobs of a failed run, stop every daemon this test started (by its pid file), then
# remove the scratch directory.
jobs_submitted=()
cleanup() {
  local f p
  if [ ${#jobs_submitted[@]} -gt 0 ] && kill -0 "$(cat "$S/slurmctld.pid" 2>/dev/null)" 2>/dev/null; then
    scancel "${jobs_submitted[@]}" 2>/dev/null || true
    for _ in $(seq 25); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for f in "$S/slurmd.pid" "$S/slurmctld.pid" "$M/munged.pid"; do
    p=$(cat "$f" 2>/dev/null) && [ -n "$p" ] || continue
    kill "$p" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$p" 2>/dev/null; then kill -9 "$p" 2>/dev/null || true; fi
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
# A signal (run_all.sh's time limit, ^C) ends the script through exit, so that the cleanup runs.
trap 'exit 143' TERM; trap 'exit 130' INT; trap 'exit 129' HUP

# --- munge: a fresh key and a socket of our own, run as the munge user.
dd if=/dev/urandom of="$M/munge.key" bs=1024 count=1 status=none
chown -R munge:munge "$M" && chmod 755 "$M" && chmod 400 "$M/munge.key"
runuser -u munge -- munged --socket="$M/munge.socket" --key-file="$M/munge.key" --pid-file="$M/munged.pid" \
  --seed-file="$M/munged.seed" --log-file="$M/munged.log" 2>"$WORK/munged.err" \
  || skip "munged did not start: $(cat "$WORK/munged.err")"

# --- slurm.conf: two free TCP ports, everything under $S.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
mem=$(( $(sed -n 's/^MemTotal: *\([0-9]*\) kB/\1/p' /proc/meminfo) / 1024 - 512 ))
export SLURM_CONF=$S/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=dptrain-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job may start again this many seconds after it ended (default 120)
AuthInfo=socket=$M/munge.socket,cred_expire=5
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
ReturnToService=2
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
# PMIx's per-step directories go under TmpFS: our own, apart from any other Slurm on this machine
TmpFS=$S/tmp
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
MinJobAge=600
KillWait=10
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF

slurmctld -i 2>"$WORK/slurmctld.err" || skip "slurmctld did not start: $(cat "$WORK/slurmctld.err")"
slurmd 2>"$WORK/slurmd.err" || skip "slurmd did not start: $(cat "$WORK/slurmd.err")"
for _ in $(seq 100); do
  state=$(sinfo -h -n "$host" -o %t 2>/dev/null || true)
  case $state in idle*|mix*|alloc*) break ;; esac
  sleep 0.2
done
case $state in
  idle*|mix*|alloc*) echo "ok: slurmctld and slurmd up, node $host $state" ;;
  *) tail -n 20 "$S/log/slurmctld.log" "$S/log/slurmd.log" 2>/dev/null
     skip "the node did not become idle (state '${state:-none}')" ;;
esac

# job_field JOBID FIELD: a field of `scontrol show job` (JobState, Restarts, ExitCode, ...)
job_field() { scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" || true; }
# wait_for JOBID LIMIT_S: until the job has finished; fails with its output after LIMIT_S seconds
wait_for() {
  local id=$1 limit=$2 t0=$SECONDS st
  while [ $((SECONDS - t0)) -lt "$limit" ]; do
    st=$(job_field "$id" JobState)
    case $st in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) return ;; esac
    sleep 0.5
  done
  cat "$WORK/job-$id.out" 2>/dev/null; scontrol show job "$id"
  fail "job $id not finished after ${limit}s (state $(job_field "$id" JobState))"
}
# completed JOBID WHAT: the job ended COMPLETED with exit code 0
completed() {
  [ "$(job_field "$1" JobState)" = COMPLETED ] && [ "$(job_field "$1" ExitCode)" = 0:0 ] \
    || { cat "$WORK/job-$1.out"; fail "$2: want COMPLETED 0:0, got $(job_field "$1" JobState) $(job_field "$1" ExitCode)"; }
}
# submit SCRIPT [sbatch options]: sbatch a script of slurm/ from the checkout, as a user would,
# and print the job id. Settings travel in the environment, as the scripts document.
submit() {
  local script=$1; shift
  (cd "$ROOT" && sbatch --parsable --output="$WORK/job-%j.out" "$@" "slurm/$script")
}

# --- job 0, a newcomer's: slurm/README.md's first command as written, run in a fresh copy of the
# checkout (its tracked files and the build, no dataset): the script makes data/synth, trains
# configs/local.ini on 2 ranks and checkpoints.
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
  fresh=$WORK/checkout
  mkdir -p "$fresh"
  (cd "$ROOT" && git ls-files -z | tar --null -T - -cf -) | tar -xf - -C "$fresh"
  ln -s "$ROOT/build" "$fresh/build"
  first=$(sed -n '/^## First job/,/^## /s/^    \(sbatch .*\)$/\1/p' "$ROOT/slurm/README.md" | sed -n 1p)
  [ -n "$first" ] || fail "slurm/README.md: no sbatch command under '## First job'"
  echo "newcomer: $first"
  said=$(cd "$fresh" && bash -c "$first" 2>&1) || fail "'$first' failed: $said"
  id0=$(sed -n 's/^Submitted batch job \([0-9]*\)$/\1/p' <<<"$said")
  [ -n "$id0" ] || fail "'$first' did not submit a job: $said"
  jobs_submitted+=("$id0")
  ln -s "$fresh/dptrain-$id0.out" "$WORK/job-$id0.out"   # where wait_for and completed look
  wait_for "$id0" 180
  completed "$id0" "job $id0 ('$first')"
  out=$WORK/job-$id0.out
  grep -q "^single-node.sbatch: data/synth .* is missing: making it" "$out" || { cat "$out"; fail "job $id0: did not say it makes data/synth"; }
  grep -q "^done: steps 1..3000 " "$out" || { cat "$out"; fail "job $id0: no 'done: steps 1..3000' line"; }
  "$BIN/dptrain-ckpt" info "$fresh/runs/slurm-$id0/checkpoints/ckpt-00003000.h5" >/dev/null \
    || fail "job $id0: no checkpoint of step 3000 in runs/slurm-$id0"
  echo "ok: job $id0: '$first' in a fresh checkout made data/synth and trained 3000 steps on 2 ranks"
  # What the README says of a job larger than the node: with slurm.conf's defaults Slurm accepts
  # it but never starts it (pending, reason PartitionConfig).
  big=$(cd "$fresh" && sbatch --parsable --ntasks=$(( $(nproc) + 1 )) slurm/single-node.sbatch) \
    || fail "sbatch --ntasks=$(( $(nproc) + 1 )) failed: $big"
  jobs_submitted+=("$big")
  # The reason is set at a scheduling pass (every 2 s here, sched_interval): polled, up to 30 s.
  for _ in $(seq 60); do [ "$(job_field "$big" Reason)" = PartitionConfig ] && break; sleep 0.5; done
  [ "$(job_field "$big" JobState) $(job_field "$big" Reason)" = "PENDING PartitionConfig" ] \
    || fail "job $big of $(( $(nproc) + 1 )) tasks on $(nproc) CPUs: $(job_field "$big" JobState) $(job_field "$big" Reason), want PENDING PartitionConfig"
  grep -q "PartitionConfig" "$ROOT/slurm/README.md" || fail "slurm/README.md does not say what a job larger than the node shows"
  scancel "$big"
  echo "ok: job $big, more tasks than the node's $(nproc) CPUs, pending with reason PartitionConfig, as the README says"
else
  echo "SKIPPED the newcomer's job: $ROOT is not a git checkout"
fi

synth "$WORK/data" --train-samples 4000 --val-samples 256
cat >"$WORK/train.ini" <<EOF
data = $WORK/data
batch-size = 8
steps = 300
log-every = 100
eval-every = 0
checkpoint-every = 100
EOF

# --- job 1: single-node.sbatch with 2 tasks trains to the end with a checkpoint.
id1=$(CONFIG=$WORK/train.ini RUN_DIR=$WORK/run1 submit single-node.sbatch --ntasks=2); jobs_submitted+=("$id1")
wait_for "$id1" 60
completed "$id1" "job 1"
out=$WORK/job-$id1.out
grep -q "2 ranks on 1 node" "$out" || { cat "$out"; fail "job 1: srun did not start 2 ranks of one MPI job"; }
grep -q "^done: steps 1..300 " "$out" || { cat "$out"; fail "job 1: no 'done: steps 1..300' line"; }
"$BIN/dptrain-ckpt" info "$WORK/run1/checkpoints/ckpt-00000300.h5" >/dev/null || fail "job 1: no valid checkpoint at step 300"
echo "ok: job $id1 trained 300 steps on 2 ranks under srun --mpi=pmix and checkpointed"

# --- job 2: preempted by SIGUSR1, requeued, resumed, finished. 60000 steps take 15 s here on 2
# idle cores: time for the signal to land mid-run, and the resumed run still ends soon. (Regular
# checkpoints also let this script's own loop run while both ranks busy-poll the only 2 cores.)
cat >"$WORK/long.ini" <<EOF
data = $WORK/data
batch-size = 8
steps = 60000
log-every = 200
eval-every = 0
checkpoint-every = 2000
keep-checkpoints = 50
EOF
id2=$(CONFIG=$WORK/long.ini RUN_DIR=$WORK/run2 submit single-node.sbatch --ntasks=2); jobs_submitted+=("$id2")
out=$WORK/job-$id2.out
t0=$SECONDS
until grep -q '"type":"step"' "$WORK/run2/metrics.jsonl" 2>/dev/null; do
  [ $((SECONDS - t0)) -lt 60 ] || { cat "$out" 2>/dev/null; fail "job 2 did not start training within 60 s"; }
  sleep 0.2
done
# What --signal=USR1@120 does before the time limit: SIGUSR1 to the tasks of the job's steps.
scancel --signal=USR1 "$id2" || fail "scancel --signal=USR1 $id2 failed"
t0=$SECONDS
until [ "$(job_field "$id2" Restarts)" = 1 ]; do
  [ $((SECONDS - t0)) -lt 60 ] || { cat "$out"; tail -n 30 "$S/log/slurmd.log" "$S/log/slurmctld.log"; fail "job 2 not requeued within 60 s of SIGUSR1"; }
  sleep 0.2
done
wait_for "$id2" 120
grep -q "dptrain exited 75" "$out" || { cat "$out"; fail "job 2: dptrain did not exit 75 after SIGUSR1"; }
grep -q "^exit 75: requeue the job with --resume auto" "$out" || { cat "$out"; fail "job 2: dptrain did not ask for a requeue after SIGUSR1"; }
at=$(sed -n '/stopped after step [0-9]* with a checkpoint/{s/.*stopped after step \([0-9]*\) .*/\1/p;q}' "$out")
[ -n "$at" ] || { cat "$out"; fail "job 2: no 'stopped after step N with a checkpoint' line"; }
"$BIN/dptrain-ckpt" info "$(printf '%s/checkpoints/ckpt-%08d.h5' "$WORK/run2" "$at")" >/dev/null \
  || fail "job 2: no valid checkpoint of step $at, where the signal stopped it"
grep -q "preempted with a checkpoint: requeueing job $id2" "$out" && ! grep -q "scontrol requeue $id2 failed" "$out" \
  || { cat "$out"; fail "job 2: the script did not requeue"; }
grep -q "resumed from .*ckpt-$(printf %08d "$at").h5 at step $at" "$out" \
  || { cat "$out"; fail "job 2: the requeued run did not resume from step $at"; }
completed "$id2" "job 2 after its restart"
grep -q "^done: steps $((at + 1))..60000 " "$out" || { cat "$out"; fail "job 2: no 'done: steps $((at + 1))..60000' line"; }
"$BIN/dptrain-ckpt" info "$WORK/run2/checkpoints/ckpt-00060000.h5" >/dev/null || fail "job 2: no final checkpoint"
echo "ok: job $id2: SIGUSR1 -> checkpoint at step $at, exit 75, requeued, resumed at step $at, finished"
echo "job $id2's log, around the requeue (slurm/README.md shows these lines):"
grep -E "^(exit 75|single-node.sbatch|slurmstepd|resumed from)|stopped after step|CANCELLED" "$out" | sed 's/^/    /'

# --- job 3: multi-node.sbatch on this one node without GPUs (--gpus-per-node=0, 2 ranks), the
# dataset staged first to "local disk" (STAGE_FROM): staging under srun once per node, the EFA
# check's path for a node without the EFA software, training from the staged copy.
id3=$(DPTRAIN_ROOT=$ROOT CONFIG=$WORK/train.ini RUN_DIR=$WORK/run3 STAGE_FROM=$WORK/data STAGE_ROOT=$WORK/nvme \
      submit multi-node.sbatch --nodes=1 --ntasks-per-node=2 --gpus-per-node=0); jobs_submitted+=("$id3")
wait_for "$id3" 60
completed "$id3" "job 3 (multi-node.sbatch)"
out=$WORK/job-$id3.out
grep -q "stage-data\[.*\]: copied 5 of 5 files, .* MB/s" "$out" || { cat "$out"; fail "job 3: no staging line"; }
[ "$(grep -c '^stage-data\[' "$out")" = 2 ] || { cat "$out"; fail "job 3: want one stager on the node (2 lines)"; }
grep -q "^data $WORK/nvme/data: 4000 training samples" "$out" || { cat "$out"; fail "job 3: did not train from the staged copy"; }
grep -q "^done: steps 1..300 " "$out" && [ -f "$WORK/run3/checkpoints/ckpt-00000300.h5" ] || { cat "$out"; fail "job 3: did not finish"; }
echo "ok: job $id3: multi-node.sbatch staged the shards once per node and trained from the copy"

# --- job 4: stage-data.sbatch finds that copy valid and reuses it.
id4=$(STAGE_FROM=$WORK/data STAGE_ROOT=$WORK/nvme submit stage-data.sbatch); jobs_submitted+=("$id4")
wait_for "$id4" 60
completed "$id4" "job 4 (stage-data.sbatch)"
grep -q "reusing the copy in $WORK/nvme/data" "$WORK/job-$id4.out" || { cat "$WORK/job-$id4.out"; fail "job 4: the copy was not reused"; }
echo "ok: job $id4: stage-data.sbatch reused the valid copy"

# --- job 9: elastic.sbatch: dptrain-elastic takes the allocation's nodes (scontrol) and launches
# the ranks with mpirun inside it, the global batch set from GLOBAL_BATCH.
id9=$(DPTRAIN_ROOT=$ROOT CONFIG=$WORK/train.ini RUN_DIR=$WORK/run9 GLOBAL_BATCH=16 MPIRUN="$MPIRUN" \
      submit elastic.sbatch --nodes=1 --ntasks-per-node=2 --gpus-per-node=0); jobs_submitted+=("$id9")
wait_for "$id9" 60
completed "$id9" "job 9 (elastic.sbatch)"
out=$WORK/job-$id9.out
grep -q "^dptrain-elastic: launch 1: 1 host ($host), 2 ranks x 8 samples (--global-batch 16), from the start" "$out" \
  && grep -q "^done: steps 1..300 " "$out" && grep -q "^dptrain-elastic: the job is done (launch 1)" "$out" \
  || { cat "$out"; fail "job 9: elastic.sbatch did not launch on the allocation's node and finish"; }
echo "ok: job $id9: elastic.sbatch launched on the allocation's node ($host, 2 ranks, global batch 16) and finished"

# --- job 5: allreduce-bench.sbatch writes the benchmark's JSON (small sizes, to be quick).
id5=$(RUN_DIR=$WORK/bench BENCH_ARGS="-b 4K -e 64K -f 4 -n 5 -w 1" submit allreduce-bench.sbatch --nodes=1 --ntasks-per-node=2)
jobs_submitted+=("$id5")
wait_for "$id5" 60
completed "$id5" "job 5 (allreduce-bench.sbatch)"
json=$WORK/bench/allreduce.json
for alg in MPI_Allreduce flat hierarchical; do
  [ "$(grep -c "\"algorithm\":\"$alg\",\"ranks\":2,.*\"wrong\":0" "$json" 2>/dev/null)" = 3 ] \
    || { cat "$WORK/job-$id5.out" "$json"; fail "job 5: want 3 sizes of $alg on 2 ranks without wrong results in $json"; }
done
echo "ok: job $id5: allreduce-bench.sbatch wrote $json (3 algorithms x 3 sizes)"

# --- job 6: dptrain as installed (make install), no checkout: single-node.sbatch from PREFIX's
# share/dptrain/slurm, submitted from an empty directory with PREFIX/bin on the PATH. It runs the
# installed programs, takes configs/local.ini from share/dptrain and makes data/synth where it was
# submitted.
make -s -C "$ROOT" install DESTDIR="$WORK/dest" PREFIX=/usr >"$WORK/install.out" 2>&1 || { cat "$WORK/install.out"; fail "make install failed"; }
mkdir -p "$WORK/user"
id6=$(cd "$WORK/user" && PATH=$WORK/dest/usr/bin:$PATH DPTRAIN_ARGS="--steps 300" \
      sbatch --parsable --output="$WORK/job-%j.out" --ntasks=2 "$WORK/dest/usr/share/dptrain/slurm/single-node.sbatch")
jobs_submitted+=("$id6")
wait_for "$id6" 60
completed "$id6" "job 6 (installed single-node.sbatch)"
out=$WORK/job-$id6.out
grep -q "^single-node.sbatch: srun .* $WORK/dest/usr/bin/dptrain --config $WORK/dest/usr/bin/../share/dptrain/configs/local.ini " "$out" \
  || { cat "$out"; fail "job 6: did not run the installed dptrain with the installed configs/local.ini"; }
grep -q "making it with $WORK/dest/usr/bin/dptrain-data synth" "$out" && [ -f "$WORK/user/data/synth/val-00000-of-00001.h5" ] \
  || { cat "$out"; fail "job 6: did not make data/synth where it was submitted"; }
grep -q "^done: steps 1..300 " "$out" && [ -f "$WORK/user/runs/slurm-$id6/checkpoints/ckpt-00000300.h5" ] \
  || { cat "$out"; fail "job 6: did not train 300 steps into runs/slurm-$id6 where it was submitted"; }
echo "ok: job $id6: the installed single-node.sbatch ran the installed dptrain from an empty directory"

# --- jobs 7 and 8: ended on purpose, with a checkpoint that takes 3 s (--inject-fault
# slow-checkpoint): `scancel --signal=TERM` signals the ranks only, plain `scancel` the whole job
# (the batch shell too), with SIGKILL KillWait (10 s here) later. Both end in a complete
# checkpoint and dptrain's exit 75, and neither is requeued: the script reads RUN_DIR/stopped-by.
stop_job() {
  local n=$1 how=$2 id out at
  id=$(CONFIG=$WORK/long.ini RUN_DIR=$WORK/run$n DPTRAIN_ARGS="--inject-fault 0:1:slow-checkpoint" \
       submit single-node.sbatch --ntasks=2); jobs_submitted+=("$id")
  out=$WORK/job-$id.out
  local t0=$SECONDS
  until grep -q '"type":"step"' "$WORK/run$n/metrics.jsonl" 2>/dev/null; do
    [ $((SECONDS - t0)) -lt 60 ] || { cat "$out" 2>/dev/null; fail "job $n did not start training within 60 s"; }
    sleep 0.2
  done
  # shellcheck disable=SC2086  # $how is scancel's options, split into words
  scancel $how "$id" || fail "scancel $how $id failed"
  wait_for "$id" 60
  grep -q "dptrain exited 75" "$out" && grep -q "^stopped: a rank received SIGTERM" "$out" \
    && grep -q "^exit 75: stopped with a checkpoint; run again with --resume auto" "$out" \
    || { cat "$out"; fail "job $n (scancel $how): want dptrain's SIGTERM stop and exit 75"; }
  at=$(sed -n '/stopped after step [0-9]* with a checkpoint/{s/.*stopped after step \([0-9]*\) .*/\1/p;q}' "$out")
  "$BIN/dptrain-ckpt" info "$(printf '%s/checkpoints/ckpt-%08d.h5' "$WORK/run$n" "${at:-0}")" >/dev/null \
    || { cat "$out"; fail "job $n (scancel $how): no valid checkpoint of step ${at:-?}"; }
  grep -q "^  ckpt .* written by rank 0, [3-9]\.[0-9]* s each" "$out" || { cat "$out"; fail "job $n: the checkpoint did not take 3 s"; }
  grep -q "(scancel or time limit): checkpoint kept, not requeued" "$out" && [ "$(job_field "$id" Restarts)" = 0 ] \
    || { cat "$out"; fail "job $n (scancel $how): want no requeue"; }
  [ "$(cat "$WORK/run$n/stopped-by")" = SIGTERM ] || fail "job $n: RUN_DIR/stopped-by is not SIGTERM"
  echo "ok: job $id: scancel${how:+ $how} -> a 3 s checkpoint of step $at, exit 75, not requeued ($(job_field "$id" JobState) $(job_field "$id" ExitCode))"
}
stop_job 7 "--signal=TERM"
stop_job 8 ""
