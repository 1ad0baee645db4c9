#!/usr/bin/env bash
# dptrain plan: the memory a rank would use, part by part, for any rank count; exit 0 when it
# fits and 1 when not; the largest micro-batch it names fits and one more does not; sharding
# divides the optimizer state; bad sizes get one line; --batch-size auto takes the largest that fits
# 90% of the budget (plan and run; on the CPU at most 64; 2 ranks under Slurm's allocation). And the plan against what a run measures:
# its peak resident memory within 15% of the plan (an MLP and a GPT, 2 ranks, replicated and
# sharded); and a rank's memory does not grow with the number of shards.
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 2000 --val-samples 128
/usr/bin/python3 "$ROOT/tests/integration/make_text.py" 40000 >"$WORK/text.txt"
"$BIN/dptrain-data" text --input "$WORK/text.txt" --out "$WORK/tok" >/dev/null
G=(--model gpt --data "$WORK/tok" --n-layer 4 --n-head 4 --n-embd 256 --block-size 128 --batch-size 8)

plan() {  # plan OPTIONS...: runs dptrain plan; output in $WORK/plan, exit code in $RC
  set +e
  timeout -k 5 60 $MPIRUN -np 1 "$BIN/dptrain" plan "$@" >"$WORK/plan" 2>&1
  RC=$?
  set -e
}
mib() { sed -n "s/^  $1  *\([0-9.]*\) MiB.*/\1/p" "$WORK/plan" | sed -n 1p; }

plan --help
[ "$RC" = 0 ] && grep -q "^usage: dptrain plan \[--ranks N\] \[--gpu-memory SIZE\]" "$WORK/plan" || { cat "$WORK/plan"; fail "plan --help: exit $RC"; }
plan "${G[@]}" --ranks 4
[ "$RC" = 0 ] && grep -q "^memory per rank (plan for 4 ranks, --batch-size 8)" "$WORK/plan" \
  && grep -q "^  largest --batch-size that fits: [0-9]" "$WORK/plan" || { cat "$WORK/plan"; fail "plan: exit $RC or no table"; }
cat "$WORK/plan"
whole=$(mib "optimizer state")
plan "${G[@]}" --ranks 4 --shard-optimizer
sharded=$(mib "optimizer state")
# m and v of a quarter (to a 16-float line; the quarter's summed gradients are a row of their own).
awk -v w="$whole" -v s="$sharded" 'BEGIN { exit !(s > 0 && s <= w / 4 + 0.1) }' \
  || { cat "$WORK/plan"; fail "--shard-optimizer on 4 ranks: optimizer state $sharded MiB, want <= 1/4 of $whole MiB"; }
echo "ok: optimizer state per rank on 4 ranks: $whole MiB replicated, $sharded MiB sharded"
# --global-batch-tokens plans the micro-batches the run would take (2 ranks x 8 windows x 128
# tokens = 2048 a micro-batch: 8192 makes 4), as --grad-accum 4 does (it planned one).
plan "${G[@]}" --ranks 2 --grad-accum 4
accum=$(grep "^  input ring" "$WORK/plan")
plan "${G[@]}" --ranks 2 --global-batch-tokens 8192
[ "$RC" = 0 ] && [ -n "$accum" ] && [ "$(grep "^  input ring" "$WORK/plan")" = "$accum" ] \
  || { cat "$WORK/plan"; fail "--global-batch-tokens 8192: want the input ring of --grad-accum 4 ($accum)"; }
echo "ok: --global-batch-tokens is planned as the micro-batches it makes: $accum"

# A GPU of 200 MiB: the plan names the largest batch; it fits, one more does not (exit 1).
plan "${G[@]}" --gpu-memory 200MiB
largest=$(sed -n 's/^  largest --batch-size that fits: \([0-9]*\).*/\1/p' "$WORK/plan")
[ "$RC" = 0 ] && [ -n "$largest" ] || { cat "$WORK/plan"; fail "--gpu-memory 200MiB: exit $RC, no largest batch"; }
plan "${G[@]}" --gpu-memory 200MiB --batch-size "$largest"
[ "$RC" = 0 ] || { cat "$WORK/plan"; fail "--batch-size $largest (the largest that fits) does not fit: exit $RC"; }
plan "${G[@]}" --gpu-memory 200MiB --batch-size $((largest + 1))
[ "$RC" = 1 ] && grep -q "DOES NOT FIT" "$WORK/plan" || { cat "$WORK/plan"; fail "--batch-size $((largest + 1)): want exit 1"; }
echo "ok: a 200 MiB GPU: --batch-size $largest fits, $((largest + 1)) does not"

# --batch-size auto: the largest batch whose plan fits in 90% of the budget. dptrain plan names it
# for a 200 MiB GPU: it fits 180 MiB and one more does not.
plan "${G[@]}" --gpu-memory 200MiB --batch-size auto
auto=$(sed -n 's/^--batch-size auto: \([0-9]*\), the largest the memory plan fits in 90% of 200.0 MiB.*/\1/p' "$WORK/plan")
[ "$RC" = 0 ] && [ -n "$auto" ] && [ "$auto" -le "$largest" ] \
  && grep -q "^memory per rank (plan for 1 rank, --batch-size $auto)" "$WORK/plan" \
  || { cat "$WORK/plan"; fail "--batch-size auto with --gpu-memory 200MiB: exit $RC, or no choice planned"; }
plan "${G[@]}" --gpu-memory 180MiB --batch-size "$auto"
[ "$RC" = 0 ] || { cat "$WORK/plan"; fail "--batch-size auto chose $auto, which does not fit 90% of 200 MiB"; }
plan "${G[@]}" --gpu-memory 180MiB --batch-size $((auto + 1))
[ "$RC" = 1 ] || { cat "$WORK/plan"; fail "--batch-size auto chose $auto, and $((auto + 1)) fits 90% of 200 MiB too"; }
echo "ok: --batch-size auto on a 200 MiB GPU: $auto (fits 180 MiB, $((auto + 1)) does not; $largest fits all 200)"

# A run on the CPU: at most 64 (a larger batch buys a CPU no speed); under a budget that holds fewer
# (Slurm's allocation, midway between the plans of 1 and of 64 windows a rank, 2 ranks), fewer,
# the same on both ranks; and not one window's worth: one line.
total() { sed -n 's/^  total (rank 0) *\([0-9.]*\) MiB/\1/p' "$WORK/plan"; }
A=(--model gpt --data "$WORK/tok" --n-layer 2 --n-head 4 --n-embd 128 --block-size 256 --steps 2 --eval-every 0)
plan "${A[@]}" --ranks 2 --batch-size 1
one=$(total)
plan "${A[@]}" --ranks 2 --batch-size 64
full=$(total)
node=$(awk -v a="$one" -v b="$full" 'BEGIN { printf "%d", 2 * (a + b) / 2 / 0.9 }')
train 1 "${A[@]}" --batch-size auto --run-dir "$WORK/auto1"
[ "$RC" = 0 ] && grep -q "^note: --batch-size auto: 64, the CPU.s cap" "$WORK/out" \
  && grep -q "^memory per rank (plan for 1 rank, --batch-size 64)" "$WORK/out" \
  || { cat "$WORK/out"; fail "--batch-size auto on the CPU: exit $RC, or not the cap of 64"; }
SLURM_MEM_PER_NODE=$node train 2 "${A[@]}" --batch-size auto --run-dir "$WORK/auto2"
got=$(sed -n 's/^note: --batch-size auto: \([0-9]*\), .*SLURM_MEM_PER_NODE.*/\1/p' "$WORK/out")
[ "$RC" = 0 ] && [ -n "$got" ] && [ "$got" -gt 1 ] && [ "$got" -lt 64 ] \
  && grep -q "^memory per rank (plan for 2 ranks, --batch-size $got)" "$WORK/out" \
  || { cat "$WORK/out"; fail "--batch-size auto under SLURM_MEM_PER_NODE=$node: exit $RC, or not between 1 and 64 ($got)"; }
echo "ok: --batch-size auto: 64 on the CPU, $got a rank under SLURM_MEM_PER_NODE=$node (plans: $one MiB at 1, $full MiB at 64)"
SLURM_MEM_PER_NODE=1 train 1 "${A[@]}" --batch-size auto --run-dir "$WORK/auto3"
[ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] && grep -q "not one sample a micro-batch fits" "$WORK/out" \
  || { cat "$WORK/out"; fail "--batch-size auto in 1 MiB: want exit 2 and one line"; }
echo "ok: --batch-size auto in 1 MiB: $(grep '^dptrain: error:' "$WORK/out")"

# plan's own options: a bad value, a name without one (it was taken for --ranks-per-node's prefix),
# an empty one (ignored), and a node size that does not divide the ranks (a run refuses it).
for bad in "--gpu-memory 12parsecs|--gpu-memory" "--ranks 0|--ranks 0" "--ranks|--ranks needs a value" \
           "--gpu-memory=|--gpu-memory is empty" "--ranks-per-node 3 --ranks 4|--ranks-per-node 3 does not divide --ranks 4"; do
  plan "${G[@]}" ${bad%%|*}
  [ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/plan")" = 1 ] && grep -q -- "${bad#*|}" "$WORK/plan" \
    || { cat "$WORK/plan"; fail "${bad%%|*}: want exit 2 and one error line naming it"; }
  echo "ok: ${bad%%|*} -> $(grep '^dptrain: error:' "$WORK/plan")"
done

# The run measures its peak; the plan (printed at start-up) within 15% of it.
# The line names the ranks of the most and the least; with 2 ranks rank 0 is one of them (usually the
# most: it also holds the checkpoint's copy, but the other rank can end a fraction of a MiB above it).
within() {  # within NAME: the run's "memory:" line, planned against measured on rank 0
  local line peak planned
  line=$(grep '^memory: peak resident' "$WORK/out") || { cat "$WORK/out"; fail "$1: no memory line"; }
  peak=$(sed -n 's/^memory: peak resident \([0-9.]*\) MiB on rank 0, the most .*/\1/p; s/.*; \([0-9.]*\) MiB on rank 0, the least$/\1/p' <<<"$line")
  planned=$(sed -n 's/.*(planned \([0-9.]*\) MiB).*/\1/p' <<<"$line")
  [ -n "$peak" ] && [ -n "$planned" ] || { cat "$WORK/out"; fail "$1: no peak of rank 0, or no plan: $line"; }
  awk -v p="$peak" -v q="$planned" 'BEGIN { d = (p - q) / p; if (d < 0) d = -d; exit !(d <= 0.15) }' \
    || fail "$1: planned $planned MiB, measured $peak MiB: more than 15% apart"
  echo "ok: $1: planned $planned MiB, measured $peak MiB"
}
train 2 --data "$WORK/data" --hidden 1024,1024 --steps 5 --eval-every 0 --run-dir "$WORK/mlp"
[ "$RC" = 0 ] && grep -q "^memory per rank (plan for 2 ranks, --batch-size 64)" "$WORK/out" || { cat "$WORK/out"; fail "mlp: exit $RC or no plan"; }
within "mlp 1024,1024 on 2 ranks"
# Memory does not grow with the shard count: the same small MLP over 4 and over 200 shards, 2
# ranks with 2 reader threads each (an open HDF5 file per shard cost 0.55 MiB a rank).
peak_of() { sed -n 's/^memory: peak resident \([0-9.]*\) MiB on rank 0, the most .*/\1/p; s/.*; \([0-9.]*\) MiB on rank 0, the least$/\1/p' "$WORK/out"; }
for n in 4 200; do
  synth "$WORK/shards$n" --train-samples 20000 --val-samples 128 --shards $n
  train 2 --data "$WORK/shards$n" --hidden 256,256 --io-threads 2 --steps 5 --eval-every 0 --run-dir "$WORK/mlp$n"
  [ "$RC" = 0 ] || { cat "$WORK/out"; fail "mlp over $n shards: exit $RC"; }
  eval "peak$n=$(peak_of)"
done
[ -n "$peak4" ] && [ -n "$peak200" ] || fail "no peak of rank 0 in the runs over 4 and 200 shards"
awk -v a="$peak4" -v b="$peak200" 'BEGIN { exit !(b - a <= 4) }' \
  || fail "rank 0's peak grew from $peak4 MiB (4 shards) to $peak200 MiB (200 shards)"
echo "ok: rank 0's peak over 4 shards $peak4 MiB, over 200 shards $peak200 MiB"
for extra in "" --shard-optimizer; do
  train 2 "${G[@]}" --steps 4 --eval-every 0 --run-dir "$WORK/gpt$extra" $extra
  [ "$RC" = 0 ] || { cat "$WORK/out"; fail "gpt $extra: exit $RC"; }
  within "gpt 4x256 on 2 ranks ${extra:-replicated}"
done
