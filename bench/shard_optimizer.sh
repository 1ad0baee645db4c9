#!/usr/bin/env bash
# Memory and step time of --shard-optimizer (ZeRO stage 1) against the replicated optimizer, and
# of --recompute block: the GPT of configs/gpt-shakespeare.ini (4 layers, 128 wide, block 256,
# batch 4) and a GPT-2-shaped model (12 layers, 12 heads, 768 wide, vocabulary 50,257: 124M
# parameters; block 256, batch 1), on 2 and 4 ranks, trained on the README as text. For each row:
# the optimizer state a rank holds and the plan's total for rank 0 (the start-up table), the
# measured peak resident memory of the most and the least loaded rank (the run's last lines;
# rank 0 also holds the checkpoint's copy), and the mean ms per step after the first interval.
# --allreduce is auto (the node's shared window for large buckets) but in the row that says flat.
#   bench/shard_optimizer.sh [SMALL_STEPS] [GPT2_STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
small_steps=${1:-60}
big_steps=${2:-4}
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
build/dptrain-data text --input README.md --out "$work/tok" >/dev/null
ms() { grep '"type":"step"' "$1/metrics.jsonl" | tail -n +2 | sed 's/.*"ms_per_step":\([0-9.e+-]*\).*/\1/' |
  awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n; else printf "-" }'; }
printf '%-6s %5s %-28s %10s %10s %12s %12s %9s\n' model ranks options "state MiB" "plan MiB" "most MiB" "least MiB" ms/step
row() {  # row NAME RANKS STEPS LABEL OPTIONS...
  local name=$1 np=$2 steps=$3 label=$4; shift 4
  local dir="$work/$name-$np-$RANDOM" line
  $MPIRUN -np "$np" build/dptrain --data "$work/tok" --steps "$steps" --log-every $((steps > 3 ? steps / 4 : 1)) \
    --eval-every 0 --checkpoint-every 0 --run-dir "$dir" "$@" >"$dir.out" 2>&1 || { cat "$dir.out"; exit 1; }
  line=$(grep '^memory: peak resident' "$dir.out")
  printf '%-6s %5s %-28s %10s %10s %12s %12s %9s\n' "$name" "$np" "$label" \
    "$(sed -n 's/^  optimizer state  *\([0-9.]*\) MiB.*/\1/p; s/^  summed gradient shard  *\([0-9.]*\) MiB.*/\1/p' "$dir.out" |
      awk '{ s += $1 } END { printf "%.1f", s }')" \
    "$(sed -n 's/^  total (rank 0)  *\([0-9.]*\) MiB.*/\1/p' "$dir.out")" \
    "$(sed -n 's/^memory: peak resident \([0-9.]*\) MiB on rank \([0-9]*\), the most.*/\1 (r\2)/p' <<<"$line")" \
    "$(sed -n 's/.*; \([0-9.]*\) MiB on rank \([0-9]*\), the least.*/\1 (r\2)/p' <<<"$line")" "$(ms "$dir")"
}
SMALL=(--config configs/gpt-shakespeare.ini --block-size 256 --batch-size 4)
GPT2=(--model gpt --n-layer 12 --n-head 12 --n-embd 768 --vocab-size 50257 --block-size 256 --batch-size 1)
for np in 2 4; do
  row small $np "$small_steps" replicated "${SMALL[@]}"
  row small $np "$small_steps" sharded "${SMALL[@]}" --shard-optimizer
done
for np in 2 4; do
  row gpt2 $np "$big_steps" replicated "${GPT2[@]}"
  row gpt2 $np "$big_steps" sharded "${GPT2[@]}" --shard-optimizer
  row gpt2 $np "$big_steps" "sharded, --allreduce flat" "${GPT2[@]}" --shard-optimizer --allreduce flat
  row gpt2 $np "$big_steps" "sharded, recompute block" "${GPT2[@]}" --shard-optimizer --recompute block
done
