#!/usr/bin/env bash
# Gradient communication in training: (1) hierarchical + small buckets + overlap gives the same
# parameters as flat without overlap (4 ranks on 2 simulated nodes; float sums in another order:
# within 1e-5 after 30 steps); (2) bf16 on the wire follows the float32 loss curve: every logged
# interval's loss within 0.03 and the final validation accuracy within 1 point.
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 4000 --val-samples 1024
common=(--data "$WORK/data" --batch-size 8 --lr 5e-3 --warmup-steps 5 --eval-every 0 --log-every 10 --ranks-per-node 2)
train 4 "${common[@]}" --steps 30 --allreduce flat --overlap off --run-dir "$WORK/flat"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "flat run exited $RC"; }
train 4 "${common[@]}" --steps 30 --allreduce hierarchical --overlap on --bucket-mb 0.02 --run-dir "$WORK/hier"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "hierarchical run exited $RC"; }
grep -q "gradients: hierarchical (2 nodes x 2 ranks.*buckets of <= 0.02 MiB, overlapped with backward" "$WORK/out" \
  || { cat "$WORK/out"; fail "the run did not say it used hierarchical, several buckets and overlap"; }
"$BIN/dptrain-ckpt" diff "$WORK/flat/checkpoints/ckpt-00000030.h5" "$WORK/hier/checkpoints/ckpt-00000030.h5" --tol 1e-5 \
  || fail "hierarchical + overlap differs from flat"

long=(--steps 600 --log-every 100 --eval-every 600 --allreduce auto)
train 4 "${common[@]}" "${long[@]}" --run-dir "$WORK/f32"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "float32 run exited $RC"; }
train 4 "${common[@]}" "${long[@]}" --grad-dtype bf16 --run-dir "$WORK/b16"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "bf16 run exited $RC"; }
paste <(grep '"type":"step"' "$WORK/f32/metrics.jsonl" | sed 's/.*"loss":\([-0-9.e+]*\).*/\1/') \
      <(grep '"type":"step"' "$WORK/b16/metrics.jsonl" | sed 's/.*"loss":\([-0-9.e+]*\).*/\1/') |
  awk '{ d = $1 - $2; if (d < 0) d = -d; printf "loss f32 %s bf16 %s diff %.4f\n", $1, $2, d; if (d > 0.03) bad = 1 }
       END { exit bad }' || fail "bf16 loss curve leaves the float32 one by more than 0.03"
a=$(jsonl_last "$WORK/f32/metrics.jsonl" eval val_accuracy)
b=$(jsonl_last "$WORK/b16/metrics.jsonl" eval val_accuracy)
echo "val accuracy f32 $a bf16 $b"
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' || fail "bf16 accuracy $b vs float32 $a"
