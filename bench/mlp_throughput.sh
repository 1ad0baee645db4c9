#!/usr/bin/env bash
# Training throughput of the MLP on the CPU backend: dptrain on 1 and 2 ranks (same per-rank
# batch, one compute thread per rank) beside the PyTorch peer (bench/mlp_pytorch.py: the same
# model, optimizer and batch, data in memory) in the same run. Needs `make` and python3-torch.
#   bench/mlp_throughput.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-4000}
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
build/dptrain-data synth --out "$work/data" >/dev/null

# Mean samples/s of the step lines after the first (warm-up) interval.
rate() { grep '"type":"step"' "$1" | tail -n +2 | sed -n 's/.*"samples_per_s":\([0-9.e+]*\).*/\1/p' |
         awk '{ s += $1; n++ } END { printf "%.0f", s / n }'; }

run() {  # run NP
  $MPIRUN -np "$1" build/dptrain --data "$work/data" --steps "$steps" --batch-size 64 --threads 1 \
    --log-every 500 --eval-every 0 --checkpoint-every 0 --run-dir "$work/r$1" >/dev/null
  rate "$work/r$1/metrics.jsonl"
}

d1=$(run 1)
d2=$(run 2)
p1=$(/usr/bin/python3 bench/mlp_pytorch.py --threads 1 --batch 64 --steps "$steps" | sed -n 's/.*: \([0-9]*\) samples.*/\1/p')
p2=$(/usr/bin/python3 bench/mlp_pytorch.py --threads 2 --batch 128 --steps "$steps" | sed -n 's/.*: \([0-9]*\) samples.*/\1/p')
echo "# MLP 32-256-256-10 ReLU, AdamW, batch 64 per rank (PyTorch: 64 x threads), $steps steps, $(nproc) cores"
printf '%-34s %12s %12s %8s\n' "configuration" "dptrain/s" "PyTorch/s" "ratio"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf '%-34s %12s %12s %8s\n' "1 rank x 1 thread (PT: 1 thread)" "$d1" "$p1" "$(ratio "$d1" "$p1")"
printf '%-34s %12s %12s %8s\n' "2 ranks x 1 thread (PT: 2 threads)" "$d2" "$p2" "$(ratio "$d2" "$p2")"
echo "dptrain scaling 1 -> 2 ranks: $(ratio "$d2" "$d1")x"
