#!/usr/bin/env bash
# Exact resume (DESIGN invariant 5): 40 steps straight and 20 + stop + resume 20 give
# bit-identical parameters and optimizer state, on 1, 2 and 4 ranks, for AdamW and SGD. 500 samples
# make epochs of 32 (1 rank) or 16 steps (2 ranks), so both halves cross epoch boundaries. The
# resumed run's metrics continue the stopped run's without repeating a step.
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 500 --val-samples 256
for np in 1 2 4; do
  for optim in adamw sgd; do
    common=(--data "$WORK/data" --steps 40 --batch-size 16 --optimizer "$optim" --lr 5e-3 --warmup-steps 5
            --eval-every 0 --log-every 10 --checkpoint-every 0 --weight-decay 0.01)
    train "$np" "${common[@]}" --run-dir "$WORK/straight-$np-$optim"
    [ "$RC" = 0 ] || { cat "$WORK/out"; fail "straight run exited $RC"; }
    train "$np" "${common[@]}" --run-dir "$WORK/split-$np-$optim" --stop-after 20
    [ "$RC" = 0 ] || { cat "$WORK/out"; fail "first half exited $RC"; }
    [ -f "$WORK/split-$np-$optim/checkpoints/ckpt-00000020.h5" ] || fail "--stop-after 20 left no checkpoint at step 20"
    train "$np" "${common[@]}" --run-dir "$WORK/split-$np-$optim" --resume auto
    [ "$RC" = 0 ] || { cat "$WORK/out"; fail "resumed run exited $RC"; }
    grep -q "resumed from .*ckpt-00000020.h5 at step 20" "$WORK/out" || { cat "$WORK/out"; fail "did not resume at step 20"; }
    "$BIN/dptrain-ckpt" diff "$WORK/straight-$np-$optim/checkpoints/ckpt-00000040.h5" \
      "$WORK/split-$np-$optim/checkpoints/ckpt-00000040.h5" || fail "$np ranks, $optim: resume is not bit-identical"
    steps=$(grep '"type":"step"' "$WORK/split-$np-$optim/metrics.jsonl" | grep -o '"step":[0-9]*' | sed 's/.*://' | tr '\n' ' ')
    [ "$steps" = "10 20 30 40 " ] || fail "metrics of the resumed run: steps '$steps', want '10 20 30 40 '"
  done
done

# A different rank count: 20 steps on 4 ranks x 8, resumed on 2 ranks x 16 (the same global batch
# of 32, so the same samples per step) -> within 1e-5 of 40 steps on 4 ranks (sums in another
# order). A resume that changes the global batch is refused with the fix.
common=(--data "$WORK/data" --steps 40 --lr 5e-3 --warmup-steps 5 --eval-every 0 --log-every 10 --checkpoint-every 0)
train 4 "${common[@]}" --batch-size 8 --run-dir "$WORK/w4"
train 4 "${common[@]}" --batch-size 8 --run-dir "$WORK/w42" --stop-after 20
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "4-rank first half exited $RC"; }
train 2 "${common[@]}" --batch-size 8 --run-dir "$WORK/w42" --resume auto
[ "$RC" = 2 ] && grep -q "global batch 32, this run has 16 (--batch-size 8 x 2 ranks x --grad-accum 1); keep the global batch: --batch-size 16, or any --batch-size x --grad-accum = 16" "$WORK/out" \
  || { cat "$WORK/out"; fail "a resume with another global batch was not refused with the fix"; }
# On 3 ranks the global batch of 32 cannot be kept: the line names rank counts that divide it (it
# advised --batch-size 0).
train 3 "${common[@]}" --batch-size 8 --run-dir "$WORK/w42" --resume auto
[ "$RC" = 2 ] && grep -q "this run has 24 (--batch-size 8 x 3 ranks x --grad-accum 1); 32 samples do not split over 3 ranks: resume on a rank count that divides 32 (2 or 4)" "$WORK/out" \
  || { cat "$WORK/out"; fail "a resume on 3 ranks of a global batch of 32: no line naming rank counts that divide it"; }
train 2 "${common[@]}" --batch-size 16 --run-dir "$WORK/w42" --resume auto
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "2-rank resume exited $RC"; }
"$BIN/dptrain-ckpt" diff "$WORK/w4/checkpoints/ckpt-00000040.h5" "$WORK/w42/checkpoints/ckpt-00000040.h5" --tol 1e-5 \
  || fail "4 -> 2 ranks resume differs from 4 ranks straight"
# A run extended with a larger --steps (and another --lr, a tighter --grad-clip) resumes, saying
# that training follows the new values (the schedule's changed without a word; the optimizer's
# settings still did).
train 2 --data "$WORK/data" --steps 60 --lr 4e-3 --warmup-steps 5 --eval-every 0 --log-every 10 --checkpoint-every 0 \
  --batch-size 16 --grad-clip 0.5 --run-dir "$WORK/w42" --resume auto
[ "$RC" = 0 ] && grep -q "^note: resuming at step 40 with --steps 60 (the checkpoint's run: 40), --lr 0.004 (the checkpoint's run: 0.005), --grad-clip 0.5 (the checkpoint's run: 1): training follows the new values from here" "$WORK/out" \
  || { cat "$WORK/out"; fail "a resume with another --steps, --lr and --grad-clip: no note of the change"; }
echo "ok: a resume with another --steps, --lr and --grad-clip says training follows them"
# The training set grown since the checkpoint (700 samples, not 500): the run goes on, warning that
# the sample order is the new set's and where step 61 now falls in its epochs.
synth "$WORK/data700" --train-samples 700 --val-samples 256
train 2 --data "$WORK/data700" --steps 70 --lr 4e-3 --warmup-steps 5 --eval-every 0 --log-every 10 --checkpoint-every 0 \
  --batch-size 16 --run-dir "$WORK/w42" --resume auto
[ "$RC" = 0 ] && grep -q "^dptrain: warning: --data .*data700 holds 700 training samples, the checkpoint's run had 500 (its --data: .*/data): from step 61 the samples follow the new set's order (epoch 2, 16 steps in; it was epoch 3, 12 steps in); resume on the checkpoint's data to continue its order exactly" "$WORK/out" \
  || { cat "$WORK/out"; fail "a resume on a larger training set: no warning naming both sizes"; }
echo "ok: a resume on a training set of another size says the order changes"
"$BIN/dptrain-ckpt" info "$WORK/w42/checkpoints/ckpt-00000070.h5" | grep -q "^.*ckpt-00000070.h5: step 70 | epoch 3 + 128 samples of 700 | global batch 32" \
  || { "$BIN/dptrain-ckpt" info "$WORK/w42/checkpoints/ckpt-00000070.h5"; fail "dptrain-ckpt info: no training set size"; }
# --resume DIR: a run directory stands for its newest checkpoint; a path that is none names the
# option and what it takes.
train 2 --data "$WORK/data700" --steps 72 --lr 4e-3 --warmup-steps 5 --eval-every 0 --log-every 10 --checkpoint-every 0 \
  --batch-size 16 --run-dir "$WORK/from-dir" --resume "$WORK/w42"
[ "$RC" = 0 ] && grep -q "resumed from .*w42/checkpoints/ckpt-00000070.h5 at step 70" "$WORK/out" \
  || { cat "$WORK/out"; fail "--resume RUN_DIR did not resume from its newest checkpoint"; }
refused 1 --data "$WORK/data700" --steps 72 --batch-size 32 --run-dir "$WORK/from-none" --resume "$WORK/none.h5"
[ "$RC" = 2 ] && grep -q "^dptrain: error: --resume .*none.h5: cannot open: No such file or directory (--resume takes auto, none, a ckpt-NNNNNNNN.h5 file or a run directory)" "$WORK/out" \
  || { cat "$WORK/out"; fail "--resume of a missing file: want one line naming --resume"; }
echo "ok: --resume RUN_DIR resumes from its newest checkpoint; a missing one names the option"
