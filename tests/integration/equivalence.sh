#!/usr/bin/env bash
# World-size independence (DESIGN invariant 1): 4 ranks x batch 8 and 1 rank x batch 32 train
# the same model: parameters after 70 steps within 1e-5 (float sums in another order). 2002
# samples make 63 steps per epoch, the last one of 18 samples split 4/5/4/5 over the ranks, so
# the run crosses an epoch boundary through an uneven partial batch.
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 2002 --val-samples 256
common=(--data "$WORK/data" --steps 70 --lr 1e-2 --warmup-steps 5 --eval-every 0 --log-every 10)
train 4 "${common[@]}" --batch-size 8 --run-dir "$WORK/a"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "4-rank run exited $RC"; }
train 1 "${common[@]}" --batch-size 32 --run-dir "$WORK/b"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "1-rank run exited $RC"; }
"$BIN/dptrain-ckpt" diff "$WORK/a/checkpoints/ckpt-00000070.h5" "$WORK/b/checkpoints/ckpt-00000070.h5" --tol 1e-5 \
  || fail "4x8 and 1x32 differ by more than 1e-5"
# And a different model (not the same run twice) is caught: another seed differs.
train 1 "${common[@]}" --batch-size 32 --run-dir "$WORK/c" --seed 99
if "$BIN/dptrain-ckpt" diff "$WORK/b/checkpoints/ckpt-00000070.h5" "$WORK/c/checkpoints/ckpt-00000070.h5" --tol 1e-5 >/dev/null; then
  fail "the comparison cannot tell different models apart"
fi
