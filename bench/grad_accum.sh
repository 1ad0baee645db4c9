#!/usr/bin/env bash
# The cost of --grad-accum: the same global batch as 1, 2 and 4 micro-batches a step, on 2 ranks,
# for the GPT of configs/gpt-docs.ini (12 windows of 64 tokens per rank and step, 24 in all) and
# the MLP of configs/local.ini (128 samples per rank and step, 256 in all). Prints the per-rank
# micro-batch, the mean ms per optimizer step over the step lines after the first interval, and
# the ratio to no accumulation. Smaller micro-batches also make smaller matrix products, so the
# ratio is the whole cost, not communication alone. The peer beside each row: PyTorch
# (bench/mlp_pytorch.py, bench/gpt_pytorch.py with --accum) on the same model, micro-batch and
# micro-batches a step, two processes of one thread (one a rank's core), data in memory and no
# all-reduce, so its ratio is what micro-batching alone costs a well-kept framework.
#   bench/grad_accum.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-600}
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
vocab=$(build/dptrain-data text --input README.md --out "$work/tok" | sed -n 's/.*vocabulary of \([0-9]*\).*/\1/p')
build/dptrain-data synth --out "$work/data" >/dev/null
ms() { grep '"type":"step"' "$1/metrics.jsonl" | tail -n +2 | sed 's/.*"ms_per_step":\([0-9.e+-]*\).*/\1/' |
  awk '{ s += $1; n++ } END { printf "%.3f", s / n }'; }
# The peer's ms per step: two processes at once, one a core as dptrain's ranks, three times; the
# median of the six. (Its time for the same run varies by up to 1.5x from one process to the next
# on this kind of machine, so one process is not a measurement.)
peer() {  # peer MODEL BATCH ACCUM STEPS
  local script=bench/mlp_pytorch.py extra= r i
  [ "$1" = gpt ] && { script=bench/gpt_pytorch.py; extra="--vocab $vocab --block 64"; }
  for r in 1 2 3; do
    for i in 1 2; do /usr/bin/python3 $script --threads 1 --batch "$2" --accum "$3" --steps "$4" $extra >"$work/peer$r$i" & done
    wait
  done
  cat "$work"/peer[123][12] | sed -n 's/.*(\([0-9.]*\) ms\/step).*/\1/p' | sort -n | awk '{ v[n++] = $1 } END { printf "%.3f", (v[2] + v[3]) / 2 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
printf '%-6s %6s %6s %10s %7s %12s %7s\n' model batch accum ms/step ratio "PyTorch ms" ratio
for model in gpt mlp; do
  if [ $model = gpt ]; then
    set -- --config configs/gpt-docs.ini --data "$work/tok" --eval-every 0 --checkpoint-every 0; global=12
  else
    set -- --config configs/local.ini --data "$work/data" --eval-every 0 --checkpoint-every 0; global=128
  fi
  base= pbase=
  for accum in 1 2 4; do
    $MPIRUN -np 2 build/dptrain "$@" --steps "$steps" --log-every $((steps / 6)) --batch-size $((global / accum)) \
      --grad-accum $accum --run-dir "$work/$model-$accum" >/dev/null
    t=$(ms "$work/$model-$accum")
    base=${base:-$t}
    p=$(peer $model $((global / accum)) $accum $([ $model = gpt ] && echo $((steps / 6)) || echo "$steps"))
    pbase=${pbase:-$p}
    printf '%-6s %6d %6d %10s %7s %12s %7s\n' $model $((global / accum)) $accum "$t" "$(ratio "$t" "$base")" "$p" "$(ratio "$p" "$pbase")"
  done
done
