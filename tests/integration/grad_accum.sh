#!/usr/bin/env bash
# --grad-accum N: W ranks x --batch-size b x N micro-batches follow the trajectory of 1 rank with
# the whole global batch W*b*N (max |difference| <= 1e-5 after 50 steps, MLP and GPT); the
# gradients cross the network once a step; a run stopped and resumed mid-way ends bit-identical;
# --global-batch-tokens derives N, or refuses a size that does not divide.
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 2000 --val-samples 128
# Generated sentences (fixed, unlike the project's docs, whose edits would move the numbers).
/usr/bin/python3 "$ROOT/tests/integration/make_text.py" 40000 >"$WORK/text.txt"
"$BIN/dptrain-data" text --input "$WORK/text.txt" --out "$WORK/tok" >/dev/null
M=(--data "$WORK/data" --steps 50 --eval-every 0 --log-every 50)
G=(--model gpt --data "$WORK/tok" --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --steps 50 --eval-every 0 --log-every 50)

# same NAME REFERENCE_RUN RUN: the step-50 parameters within 1e-5 (AdamW's moments are printed
# too: summed in another order, the gradients differ in their last bits, and so do m and v)
same() {
  "$BIN/dptrain-ckpt" diff "$WORK/$2/checkpoints/ckpt-00000050.h5" "$WORK/$3/checkpoints/ckpt-00000050.h5" >"$WORK/diff.out" || true
  local p
  p=$(sed -n 's/.*max abs diff: params \([0-9.e+-]*\),.*/\1/p' "$WORK/diff.out")
  awk -v p="${p:-1}" 'BEGIN { exit !(p <= 1e-5) }' || { cat "$WORK/diff.out"; fail "$1: parameters of $3 differ from $2's by ${p:-?} > 1e-5"; }
  echo "ok: $1: $(tail -n1 "$WORK/diff.out")"
}
for model in mlp gpt; do
  if [ $model = mlp ]; then O=("${M[@]}"); b=16; else O=("${G[@]}"); b=8; fi
  train 1 "${O[@]}" --batch-size $b --run-dir "$WORK/$model-1x$b"
  [ "$RC" = 0 ] || { cat "$WORK/out"; fail "$model: 1 rank x $b: exit $RC"; }
  train 2 "${O[@]}" --batch-size $((b / 4)) --grad-accum 2 --run-dir "$WORK/$model-2x$((b / 4))x2"
  [ "$RC" = 0 ] && grep -q "global batch $b ($((b / 4)) per rank x 2 micro-batches)" "$WORK/out" \
    || { cat "$WORK/out"; fail "$model: 2 ranks x $((b / 4)) x 2: exit $RC, or no banner of the global batch"; }
  same "$model, 2 ranks x $((b / 4)) x 2 micro-batches against 1 rank x $b" "$model-1x$b" "$model-2x$((b / 4))x2"
  train 1 "${O[@]}" --batch-size $((b / 4)) --grad-accum 4 --run-dir "$WORK/$model-1x$((b / 4))x4"
  [ "$RC" = 0 ] || { cat "$WORK/out"; fail "$model: 1 rank x $((b / 4)) x 4: exit $RC"; }
  same "$model, 1 rank x $((b / 4)) x 4 micro-batches against 1 rank x $b" "$model-1x$b" "$model-1x$((b / 4))x4"
done

# The sum crosses the network once a step: 3 buckets a step in the trace, not 3 per micro-batch.
train 2 "${M[@]}" --steps 10 --batch-size 4 --grad-accum 3 --bucket-mb 0.1 --overlap on --run-dir "$WORK/traced" \
  --trace "$WORK/traced/trace.json"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "the traced run: exit $RC"; }
/usr/bin/python3 - "$WORK/traced/trace-rank00000.json" <<'PY' || fail "the gradients were not summed once a step"
import json, sys
t = json.load(open(sys.argv[1]))
ev = t["traceEvents"] if isinstance(t, dict) else t
count = lambda name: sum(1 for e in ev if e.get("name") == name)
sums, steps, backwards = count("allreduce"), count("optimizer"), count("backward")
print(f"{steps} steps, {backwards} backward passes, {sums} bucket sums")
sys.exit(0 if steps == 10 and backwards == 30 and sums == 30 else 1)
PY
echo "ok: 10 steps of 3 micro-batches: 30 backward passes, 3 buckets x 10 steps summed"

# Stopped at step 25 and resumed: bit-identical to the straight run (2 ranks x 4 x 2).
train 2 "${M[@]}" --batch-size 4 --grad-accum 2 --stop-after 25 --run-dir "$WORK/resumed"
train 2 "${M[@]}" --batch-size 4 --grad-accum 2 --resume auto --run-dir "$WORK/resumed"
[ "$RC" = 0 ] && grep -q "resumed from .*ckpt-00000025.h5 at step 25" "$WORK/out" || { cat "$WORK/out"; fail "resume: exit $RC"; }
train 2 "${M[@]}" --batch-size 4 --grad-accum 2 --run-dir "$WORK/straight"
"$BIN/dptrain-ckpt" diff "$WORK/resumed/checkpoints/ckpt-00000050.h5" "$WORK/straight/checkpoints/ckpt-00000050.h5" \
  >"$WORK/diff.out" || { cat "$WORK/diff.out"; fail "the resumed run is not bit-identical to the straight one"; }
echo "ok: stopped at step 25 and resumed -> $(tail -n1 "$WORK/diff.out")"

# --global-batch-tokens: 2 ranks x 2 windows x 32 tokens = 128 a micro-batch; 512 makes 4.
train 2 "${G[@]}" --steps 5 --batch-size 2 --global-batch-tokens 512 --run-dir "$WORK/tokens"
[ "$RC" = 0 ] && grep -q "global batch 16 (2 per rank x 4 micro-batches)" "$WORK/out" \
  || { cat "$WORK/out"; fail "--global-batch-tokens 512: want 4 micro-batches"; }
echo "ok: --global-batch-tokens 512 -> 4 micro-batches of 2 ranks x 2 windows x 32 tokens"
train 2 "${G[@]}" --steps 5 --batch-size 2 --global-batch-tokens 500 --run-dir "$WORK/tokens-bad"
[ "$RC" = 2 ] && grep -q "^dptrain: error: --global-batch-tokens 500 is not a multiple of ranks x --batch-size x --block-size = 2 x 2 x 32 = 128" "$WORK/out" \
  || { cat "$WORK/out"; fail "--global-batch-tokens 500: want one line refusing it"; }
echo "ok: $(grep '^dptrain: error:' "$WORK/out" | cut -c1-140)"
# Both --global-batch-tokens and --grad-accum: refused (the tokens' count replaced --grad-accum 3
# without a word).
train 2 "${G[@]}" --steps 5 --batch-size 2 --global-batch-tokens 512 --grad-accum 3 --run-dir "$WORK/tokens-both"
[ "$RC" = 2 ] && grep -q "^dptrain: error: --global-batch-tokens 512 sets the micro-batches a step itself; give it or --grad-accum 3, not both" "$WORK/out" \
  || { cat "$WORK/out"; fail "--global-batch-tokens with --grad-accum: want one line refusing the pair"; }
echo "ok: $(grep '^dptrain: error:' "$WORK/out" | cut -c1-140)"
