#!/usr/bin/env bash
# The MLP learns the synthetic set: 2 ranks, 2000 steps, validation accuracy >= 85%
# (the set's labels carry 2% noise; this configuration reaches ~88% here).
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 65536 --val-samples 4096
train 2 --data "$WORK/data" --run-dir "$WORK/run" --steps 2000 --batch-size 64 --lr 2e-3 --warmup-steps 20 \
  --eval-every 1000 --log-every 500 --checkpoint-every 0
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training exited $RC"; }
acc=$(jsonl_last "$WORK/run/metrics.jsonl" eval val_accuracy)
loss0=$(grep -m1 '"type":"step"' "$WORK/run/metrics.jsonl" | sed -n 's/.*"loss":\([-0-9.e+]*\).*/\1/p')
loss1=$(jsonl_last "$WORK/run/metrics.jsonl" step loss)
echo "val accuracy $acc; train loss $loss0 -> $loss1"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.85) }' || fail "val accuracy $acc < 0.85"
awk -v a="$loss0" -v b="$loss1" 'BEGIN { exit !(b < 0.6 * a) }' || fail "loss did not fall: $loss0 -> $loss1"
[ -f "$WORK/run/checkpoints/ckpt-00002000.h5" ] || fail "no final checkpoint"
grep -q "checkpoint: $WORK/run/checkpoints/ckpt-00002000.h5" "$WORK/out" || fail "final line does not name the checkpoint"
