#!/usr/bin/env bash
# The README's first command works: `make run` builds, makes the default text dataset from the
# project's docs, trains the small GPT on 2 ranks (step lines, evaluations, checkpoints), writes a
# sample from the newest checkpoint and plots the run; `make run-mlp` does the same for the MLP on
# the synthetic set.
source "$(dirname "$0")/lib.bash"
cd "$ROOT"

make_target() {  # make_target TARGET: runs it into $WORK/out; fails the test on a non-zero exit
  set +e
  timeout -k 5 600 make --no-print-directory "$1" >"$WORK/out" 2>&1
  RC=$?
  set -e
  [ "$RC" = 0 ] || { tail -n 30 "$WORK/out"; fail "make $1 exited $RC"; }
}

plotted() {  # plotted RUN_DIR: the four charts, as PNG files
  for c in loss lr throughput phases; do
    grep -q "^dptrain-report: wrote $1/plots/$c.png" "$WORK/out" || { tail -n 12 "$WORK/out"; fail "$1 was not plotted ($c)"; }
    [ "$(head -c 8 "$1/plots/$c.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$1/plots/$c.png is not a PNG"
  done
  echo "plots: $1/plots/{loss,lr,throughput,phases}.{png,svg}"
}

make_target run
grep -q "^data data/docs: .* training tokens" "$WORK/out" || { head -n 30 "$WORK/out"; fail "make run did not train on data/docs"; }
grep -q "^model gpt " "$WORK/out" || fail "make run did not train the GPT"
grep -q "^step 1500/1500 100% | loss .* tok/s" "$WORK/out" || { tail -n 30 "$WORK/out"; fail "no last step line"; }
for s in 500 1000 1500; do
  grep -q "^eval at step $s " "$WORK/out" || { tail -n 30 "$WORK/out"; fail "no evaluation at step $s"; }
done
grep -q "^checkpoint: runs/gpt/checkpoints/ckpt-00001500.h5" "$WORK/out" || fail "no final checkpoint line"
"$BIN/dptrain-ckpt" info runs/gpt/checkpoints/ckpt-00001500.h5
# It learned: a uniform guess over the ~110 characters has a loss of ln(110) = 4.7.
v=$(jsonl_last runs/gpt/metrics.jsonl eval val_loss)
awk -v v="$v" 'BEGIN { exit !(v < 2.5) }' || fail "make run: final validation loss $v, want < 2.5"
# The sample: the prompt and 300 generated characters, after the generate command line.
sample=$(sed -n '/dptrain generate --checkpoint runs\/gpt/,/dptrain-report plot/p' "$WORK/out" | sed '1d;$d')
[ "${sample:0:4}" = "The " ] && [ "$(printf '%s' "$sample" | wc -m)" -ge 304 ] \
  || { printf '%s\n' "$sample"; fail "make run printed no sample of 300 characters after the prompt"; }
grep '^done:' "$WORK/out"
echo "val loss $v; sample: $(printf '%s' "$sample" | head -c 120 | tr '\n' ' ')"
plotted runs/gpt

make_target run-mlp
grep -q "^eval at step 3000 " "$WORK/out" || { tail -n 30 "$WORK/out"; fail "make run-mlp: no final evaluation"; }
grep -q "^checkpoint: runs/local/checkpoints/ckpt-00003000.h5" "$WORK/out" || fail "make run-mlp: no final checkpoint line"
"$BIN/dptrain-ckpt" info runs/local/checkpoints/ckpt-00003000.h5
grep '^done:' "$WORK/out"
plotted runs/local
