#!/usr/bin/env bash
# The README's quick start, its commands taken from README.md as written: the apt-get line (as
# root) and `make run`, which builds, makes the default text dataset from the project's docs,
# trains the small GPT on 2 ranks (step lines, evaluations, checkpoints), writes a sample from the
# newest checkpoint and plots the run. Then `make run-mlp`, the same for the MLP. (The quick
# start's `make test` is what runs this test, so it is not run again here.)
source "$(dirname "$0")/lib.bash"
cd "$ROOT"

run_cmd() {  # run_cmd COMMAND: runs it with bash into $WORK/out; fails the test on a non-zero exit
  echo "+ $1"
  set +e
  timeout -k 5 600 bash -c "$1" >"$WORK/out" 2>&1
  RC=$?
  set -e
  [ "$RC" = 0 ] || { tail -n 30 "$WORK/out"; fail "'$1' exited $RC"; }
}

# The quick start's code lines, comments dropped.
quick=$(sed -n '/^## Quick start/,/^## /p' README.md | sed -n 's/^    \([a-z].*\)$/\1/p' | sed 's/ *#.*//')
apt_line=$(grep -m1 '^apt-get ' <<<"$quick" || true)
run_line=$(grep -m1 '^make run' <<<"$quick" || true)
[ -n "$apt_line" ] && [ -n "$run_line" ] || { echo "$quick"; fail "README.md's quick start has no apt-get line or no make run line"; }
grep -qx 'make test' <<<"$quick" || fail "README.md's quick start does not say 'make test'"
if [ "$(id -u)" = 0 ]; then run_cmd "$apt_line"; else echo "SKIPPED '$apt_line': not root"; fi

plotted() {  # plotted RUN_DIR: the four charts, as PNG files
  for c in loss lr throughput phases; do
    grep -q "^dptrain-report: wrote $1/plots/$c.png" "$WORK/out" || { tail -n 12 "$WORK/out"; fail "$1 was not plotted ($c)"; }
    [ "$(head -c 8 "$1/plots/$c.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "$1/plots/$c.png is not a PNG"
  done
  echo "plots: $1/plots/{loss,lr,throughput,phases}.{png,svg}"
}

run_cmd "$run_line"
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
echo "val loss $v; sample: $(printf '%s' "${sample:0:120}" | tr '\n' ' ')"
plotted runs/gpt

run_cmd "make run-mlp"
grep -q "^eval at step 3000 " "$WORK/out" || { tail -n 30 "$WORK/out"; fail "make run-mlp: no final evaluation"; }
grep -q "^checkpoint: runs/local/checkpoints/ckpt-00003000.h5" "$WORK/out" || fail "make run-mlp: no final checkpoint line"
"$BIN/dptrain-ckpt" info runs/local/checkpoints/ckpt-00003000.h5
grep '^done:' "$WORK/out"
plotted runs/local
