#!/usr/bin/env bash
# dptrain doctor and --preflight: on this machine it must find libfabric's tcp and shm providers,
# report efa absent (with the fix), find the data and the checkpoint directory; a missing dataset
# or an unwritable checkpoint directory is fatal (exit 2), and --preflight stops before training.
# (The error line is matched anywhere in a line: mpirun forwards stdout and stderr separately,
# so the report and the error can interleave.)
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 512 --val-samples 64
set +e
timeout -k 5 60 $MPIRUN -np 2 "$BIN/dptrain" doctor --data "$WORK/data" --run-dir "$WORK/run" >"$WORK/out" 2>&1
rc=$?
set -e
cat "$WORK/out"
[ "$rc" = 0 ] || fail "doctor on a good setup exited $rc"
for want in "libfabric providers: .*tcp" "libfabric providers: .*shm" "no efa: traffic between nodes will go over TCP" \
            "data $WORK/data: 4 shards readable" "checkpoint directory $WORK/run/checkpoints writable" \
            "^rank 1 on " "^doctor: 0 fatal problems"; do
  grep -q -- "$want" "$WORK/out" || fail "doctor output lacks '$want'"
done
# doctor changes nothing: it made the run directory it checked, and beside a training job in that
# directory it would have removed a live checkpoint write's temporary file.
[ ! -e "$WORK/run" ] || fail "doctor made $WORK/run"
mkdir -p "$WORK/live/checkpoints" && : >"$WORK/live/checkpoints/.ckpt-00000040.h5.tmp"
timeout -k 5 60 $MPIRUN -np 1 "$BIN/dptrain" doctor --data "$WORK/data" --run-dir "$WORK/live" >"$WORK/out" 2>&1 \
  && grep -q "checkpoint directory $WORK/live/checkpoints writable, " "$WORK/out" || { cat "$WORK/out"; fail "doctor on an existing run directory"; }
[ -e "$WORK/live/checkpoints/.ckpt-00000040.h5.tmp" ] || fail "doctor removed a checkpoint being written"
echo "ok: doctor leaves the run directory as it was"
set +e
timeout -k 5 60 $MPIRUN -np 2 "$BIN/dptrain" doctor --data "$WORK/nothing" --run-dir "$WORK/run" >"$WORK/out" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "FATAL --data $WORK/nothing: directory not found" "$WORK/out" && grep -q "^doctor: 2 fatal problems" "$WORK/out" \
  || { cat "$WORK/out"; fail "doctor with a missing dataset: want exit 2 and a FATAL line per rank"; }
train 2 --data "$WORK/data" --run-dir "$WORK/run2" --checkpoint-dir /proc/dptrain-cannot-write --preflight --steps 5
[ "$RC" = 2 ] && grep -q "FATAL --checkpoint-dir /proc/dptrain-cannot-write" "$WORK/out" \
  && grep -q "dptrain: error: --preflight found 2 fatal problems" "$WORK/out" && ! grep -q "^step" "$WORK/out" \
  || { cat "$WORK/out"; fail "--preflight did not stop on an unwritable checkpoint directory"; }
# doctor judges the GPUs by the run's --device: cuda without a GPU is fatal (it found none fatal,
# and the run then failed), as is --gpu-health on without NVML; --device cpu needs no GPU.
if ! nvidia-smi -L >/dev/null 2>&1; then
  set +e
  timeout -k 5 60 $MPIRUN -np 1 "$BIN/dptrain" doctor --data "$WORK/data" --run-dir "$WORK/run" --device cuda \
    >"$WORK/out" 2>&1
  rc=$?
  set -e
  [ "$rc" = 2 ] && grep -q "FATAL --device cuda, but no GPU (.*): run on a GPU node, or use --device auto or cpu" "$WORK/out" \
    || { cat "$WORK/out"; fail "doctor --device cuda without a GPU: want exit 2 and a FATAL line"; }
  set +e
  timeout -k 5 60 $MPIRUN -np 1 "$BIN/dptrain" doctor --data "$WORK/data" --run-dir "$WORK/run" --device cpu >"$WORK/out" 2>&1
  rc=$?
  set -e
  [ "$rc" = 0 ] && grep -q "ok  *--device cpu: the CPU backend will train" "$WORK/out" \
    || { cat "$WORK/out"; fail "doctor --device cpu: want exit 0"; }
else
  echo "SKIPPED doctor --device cuda without a GPU: this machine has one"
fi
set +e
DPTRAIN_NVML_LIB="$WORK/missing.so" timeout -k 5 60 $MPIRUN -np 1 -x DPTRAIN_NVML_LIB "$BIN/dptrain" doctor --data "$WORK/data" \
  --run-dir "$WORK/run" --gpu-health on >"$WORK/out" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "FATAL --gpu-health on, but .*missing.so not loaded.*: use --gpu-health auto or off" "$WORK/out" \
  || { cat "$WORK/out"; fail "doctor --gpu-health on without NVML: want exit 2 and a FATAL line"; }
echo "ok: doctor and --preflight"
