#!/usr/bin/env bash
# How long a stop signal takes to become a checkpoint and exit 75, with long steps: an MLP whose
# step takes about half a second on 2 ranks, SIGTERM to both ranks (as Open MPI forwards it, and
# as Slurm's scancel sends it) at a random moment of the run. Prints, per trial, the seconds from
# the signal to mpirun's exit, the checkpoint's write time (the breakdown's ckpt row), the step
# time, and the rest (the signal to the start of the write, and the exit) in steps. Give another
# build's dptrain to compare: the same trials, the same random moments (seeded); a build whose
# breakdown has no ckpt row gets write_s 0 (take the other build's).
#   bench/stop_latency.sh [BIN_DIR (default build)] [TRIALS (default 8)]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build}
trials=${2:-8}
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
build/dptrain-data synth --out "$work/data" --train-samples 20000 --val-samples 512 --features 512 >/dev/null
RANDOM=7  # the same moments for every build compared
printf '%-6s %9s %9s %9s %12s\n' trial stop_s write_s step_s rest_steps
for t in $(seq "$trials"); do
  rm -rf "$work/run"
  $MPIRUN -np 2 "$bin/dptrain" --data "$work/data" --hidden 2048,2048 --batch-size 1024 --steps 100000 \
    --checkpoint-every 0 --eval-every 0 --log-every 1 --progress plain --run-dir "$work/run" >"$work/out" 2>&1 &
  launcher=$!
  until grep -q '"type":"step"' "$work/run/metrics.jsonl" 2>/dev/null; do sleep 0.05; done
  sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.2f", 1 + 2 * r / 32767 }')"
  t0=$(date +%s.%N)
  for p in $(pgrep -f -- "--run-dir $work/run"); do
    [ "$(ps -o comm= -p "$p" 2>/dev/null)" = dptrain ] && kill -TERM "$p" 2>/dev/null || true
  done
  wait "$launcher" || true
  t1=$(date +%s.%N)
  write=$(sed -n 's/^  ckpt .*written by rank 0, \([0-9.]*\) s each.*/\1/p' "$work/out")
  step=$(/usr/bin/python3 -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
s = [r for r in recs if r["type"] == "summary"][-1]
print("%.3f" % (sum(v["mean_ms"] for v in s["phases"].values()) / 1000))' "$work/run/metrics.jsonl")
  awk -v t=$t -v a="$t0" -v b="$t1" -v w="${write:-0}" -v s="$step" \
    'BEGIN { d = b - a; printf "%-6d %9.2f %9.2f %9.3f %12.2f\n", t, d, w, s, (d - w) / s }'
done
