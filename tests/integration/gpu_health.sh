#!/usr/bin/env bash
# GPU health through NVML, loaded at run time: with a stand-in NVML library (fake/nvml.c, two
# GPUs at 20% busy) every rank's GPU is recorded at every step line and the doctor shows it; a
# CPU-backend run gets no idle-GPU warning (its GPU idles by design; the warning needs a GPU run);
# without NVML, auto turns it off and says why, and on is refused with one line.
source "$(dirname "$0")/lib.bash"
gcc -shared -fPIC -O1 -o "$WORK/libnvidia-ml.so.1" "$ROOT/tests/integration/fake/nvml.c" || fail "cannot build the stand-in NVML"
synth "$WORK/data" --train-samples 2000 --val-samples 256

DPTRAIN_NVML_LIB="$WORK/libnvidia-ml.so.1" MPIRUN="$MPIRUN -x DPTRAIN_NVML_LIB" \
  train 2 --data "$WORK/data" --steps 30 --batch-size 16 --log-every 10 --run-dir "$WORK/run" --inject-fault 1:1:slow-read
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "the run with NVML exited $RC"; }
grep -q '^GPU health: NVML, every rank' "$WORK/out" || { cat "$WORK/out"; fail "no GPU health banner line"; }
# The idle-GPU warning is for runs that train on the GPU; on the CPU backend the GPU idles by design.
grep -q '^warning: waiting for data takes' "$WORK/out" || { cat "$WORK/out"; fail "no data-wait warning on the input-bound run"; }
grep -q '^warning: the GPU of rank' "$WORK/out" && { cat "$WORK/out"; fail "an idle-GPU warning on a CPU-backend run"; }
/usr/bin/python3 - "$WORK/run/metrics.jsonl" <<'PY' || fail "the gpu records are wrong"
import json, sys
gpu = [r for r in map(json.loads, open(sys.argv[1])) if r["type"] == "gpu"]
got = sorted((r["step"], r["rank_id"]) for r in gpu)
want = [(s, k) for s in (10, 20, 30) for k in (0, 1)]
bad = [] if got == want else [f"gpu records at {got}, want {want}"]
for r in gpu:
    if (r["gpu_util_pct"], r["gpu_mem_used_mib"], r["gpu_mem_total_mib"], r["gpu_temp_c"], r["gpu_power_w"]) != (20, 1024, 81920, 40, 300):
        bad.append(f"record {r}")
print("\n".join(bad[:5]) if bad else f"gpu records ok: {len(gpu)}")
sys.exit(1 if bad else 0)
PY

set +e
DPTRAIN_NVML_LIB="$WORK/libnvidia-ml.so.1" "$BIN/dptrain" doctor --data "$WORK/data" --run-dir "$WORK/doc" >"$WORK/doctor.out" 2>&1
set -e
grep -q "GPU 0 (NVML): Fake GPU: 20% busy, 1.0/80.0 GiB, 40 C, 300 W" "$WORK/doctor.out" || { cat "$WORK/doctor.out"; fail "the doctor does not show the GPU"; }

# No NVML: auto says why and trains; on is refused.
DPTRAIN_NVML_LIB="$WORK/missing.so" MPIRUN="$MPIRUN -x DPTRAIN_NVML_LIB" train 1 --data "$WORK/data" --steps 5 --run-dir "$WORK/r2"
# Beside a GPU the banner says why health is off; without one, one calm line says the CPU trains.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  [ "$RC" = 0 ] && grep -q "^GPU health: off (.*missing.so not loaded" "$WORK/out" || { cat "$WORK/out"; fail "auto without NVML"; }
else
  [ "$RC" = 0 ] && grep -q "^no GPU here: .*; the CPU backend trains\|^dptrain .*| no CUDA |" "$WORK/out" \
    && ! grep -q "GPU health: off\|✓\|✗" "$WORK/out" || { cat "$WORK/out"; fail "banner without a GPU is not one calm line"; }
fi
DPTRAIN_NVML_LIB="$WORK/missing.so" MPIRUN="$MPIRUN -x DPTRAIN_NVML_LIB" train 1 --data "$WORK/data" --steps 5 --run-dir "$WORK/r3" --gpu-health on
[ "$RC" = 2 ] && grep -q "dptrain: error: --gpu-health on: .*missing.so not loaded" "$WORK/out" || { cat "$WORK/out"; fail "--gpu-health on without NVML was not refused"; }
echo "gpu health ok"
