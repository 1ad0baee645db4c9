#!/usr/bin/env bash
# The cost of --recompute: the GPT of configs/gpt-shakespeare.ini (4 layers, 4 heads, 128 wide) at
# block size 256, batch 6 windows on 1 rank, trained on the README as text, with none, attention
# and block recomputation. Prints the activation bytes the banner reports, the mean ms per step
# over the step lines after the first interval, and the ratio to no recomputation.
#   bench/recompute.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-120}
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
build/dptrain-data text --input README.md --out "$work/tok" >/dev/null
ms() { grep '"type":"step"' "$1/metrics.jsonl" | tail -n +2 | sed 's/.*"ms_per_step":\([0-9.e+-]*\).*/\1/' |
  awk '{ s += $1; n++ } END { printf "%.1f", s / n }'; }
printf '%-10s %16s %10s %7s\n' recompute "activations MiB" ms/step ratio
base=
for r in none attention block; do
  $MPIRUN -np 1 build/dptrain --config configs/gpt-shakespeare.ini --data "$work/tok" --block-size 256 \
    --batch-size 6 --steps "$steps" --log-every $((steps / 6)) --eval-every 0 --checkpoint-every 0 \
    --recompute "$r" --run-dir "$work/$r" >"$work/$r.out"
  mb=$(sed -n 's/^activations: \([0-9.]*\) MiB.*/\1/p' "$work/$r.out")
  t=$(ms "$work/$r")
  base=${base:-$t}
  printf '%-10s %16s %10s %7.3f\n' "$r" "$mb" "$t" "$(awk -v a="$t" -v b="$base" 'BEGIN { print a / b }')"
done
