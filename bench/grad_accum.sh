#!/usr/bin/env bash
# The cost of --grad-accum: the same global batch as 1, 2 and 4 micro-batches a step, on 2 ranks,
# for the GPT of configs/gpt-docs.ini (12 windows of 64 tokens per rank and step, 24 in all) and
# the MLP of configs/local.ini (128 samples per rank and step, 256 in all). Prints the per-rank
# micro-batch, the mean ms per optimizer step over the step lines after the first interval, and
# the ratio to no accumulation. Smaller micro-batches also make smaller matrix products, so the
# ratio is the whole cost, not communication alone.
#   bench/grad_accum.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-600}
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
build/dptrain-data text --input README.md --out "$work/tok" >/dev/null
build/dptrain-data synth --out "$work/data" >/dev/null
ms() { grep '"type":"step"' "$1/metrics.jsonl" | tail -n +2 | sed 's/.*"ms_per_step":\([0-9.e+-]*\).*/\1/' |
  awk '{ s += $1; n++ } END { printf "%.3f", s / n }'; }
printf '%-6s %6s %6s %10s %7s\n' model batch accum ms/step ratio
for model in gpt mlp; do
  if [ $model = gpt ]; then
    set -- --config configs/gpt-docs.ini --data "$work/tok" --eval-every 0 --checkpoint-every 0; global=12
  else
    set -- --config configs/local.ini --data "$work/data" --eval-every 0 --checkpoint-every 0; global=128
  fi
  base=
  for accum in 1 2 4; do
    $MPIRUN -np 2 build/dptrain "$@" --steps "$steps" --log-every $((steps / 6)) --batch-size $((global / accum)) \
      --grad-accum $accum --run-dir "$work/$model-$accum" >/dev/null
    t=$(ms "$work/$model-$accum")
    base=${base:-$t}
    printf '%-6s %6d %6d %10s %7.3f\n' $model $((global / accum)) $accum "$t" "$(awk -v a="$t" -v b="$base" 'BEGIN { print a / b }')"
  done
done
