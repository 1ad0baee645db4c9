#!/usr/bin/env bash
# --model llama end to end (the ops, the golden comparison with PyTorch and the decoder are unit
# tests: test_llama.cpp, test_golden.cpp, test_llama_decode.cpp):
#   1. 2 ranks train a Llama (grouped-query attention, untied head, rope theta 500); its export as
#      LlamaForCausalLM, read by an independent PyTorch Llama (hf_llama_reference.py), gives
#      dptrain's logits within 1e-5 and dptrain eval's validation loss within 1e-4; the bfloat16
#      export gives both sides the same logits of the rounded weights (within 1e-5)
#   1b. import: the export back as a checkpoint has the trained parameters bit for bit; dptrain
#      reads weights as transformers writes them (rotary buffers, sorted names) with Llama 3's
#      rope scaling, its logits PyTorch's within 1e-5; --init-from starts a run at the trained loss;
#      an unknown rope_scaling type and a run whose shape differs are refused in one line each
#   2. exact resume: 40 steps straight and 20 + stop + 20 resumed end bit-identical, plain and with
#      --shard-optimizer, --recompute block and bf16 flash attention together
#   3. accumulation: 2 ranks x 2 windows x --grad-accum 2 follow 1 rank x 8 (params within 1e-5)
#   4. generate: greedy text with the key/value cache equals recomputing the window
#   4b. serve: a greedy completion over HTTP is generate's text
#   5. bad options: --n-kv-head that does not divide --n-head, Llama options on a GPT: one line each
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
REF="$ROOT/tests/integration/hf_llama_reference.py"
$PY -c 'import torch, h5py' 2>/dev/null || fail "python3-torch or python3-h5py is missing: run make test-deps"
"$PY" "$ROOT/tests/integration/make_text.py" 40000 >"$WORK/text.txt"
"$BIN/dptrain-data" text --input "$WORK/text.txt" --out "$WORK/tok" --vocab char >/dev/null
L=(--model llama --data "$WORK/tok" --n-layer 2 --n-head 2 --n-kv-head 1 --n-embd 32 --ffn-hidden 48 --block-size 32
   --rope-theta 500 --untie-embeddings --lr 3e-3 --warmup-steps 5 --eval-every 0 --log-every 10)

# 1. Training, export, and the independent reader.
train 2 "${L[@]}" --batch-size 8 --steps 80 --run-dir "$WORK/run"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training exited $RC"; }
grep -q "model llama V=[0-9]* T=32 L=2 H=2 KV=1 C=32 F=48 theta=500 eps=1e-05 tied=0" "$WORK/out" \
  || { cat "$WORK/out"; fail "the banner does not name the Llama's shape"; }
CK="$WORK/run/checkpoints/ckpt-00000080.h5"
first=$(grep '"type":"step"' "$WORK/run/metrics.jsonl" | head -n1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
last=$(grep '"type":"step"' "$WORK/run/metrics.jsonl" | tail -n1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.75 * a) }' || fail "the loss went from $first to $last: not learning"
"$BIN/dptrain-ckpt" export "$CK" --out "$WORK/hf" >/dev/null
grep -q '"architectures": \[' "$WORK/hf/config.json" && grep -q '"LlamaForCausalLM"' "$WORK/hf/config.json" \
  && grep -q '"num_key_value_heads": 1' "$WORK/hf/config.json" && grep -q '"tie_word_embeddings": false' "$WORK/hf/config.json" \
  || { cat "$WORK/hf/config.json"; fail "config.json is not LlamaForCausalLM's"; }
V=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$WORK/hf/config.json")
ids=$($PY -c "import random; random.seed(5); print(','.join(str(random.randrange($V)) for _ in range(32)))")
compare() {  # A.npy B.npy TOL WHAT
  $PY - "$@" <<'PYEOF' || fail "$4: logits differ"
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == b.shape, f"shapes {a.shape} vs {b.shape}"
d = float(np.abs(a - b).max())
print(f"ok: {sys.argv[4]}: {a.shape[0]} positions x {a.shape[1]} logits, max |dptrain - PyTorch| = {d:.2e} (tolerance {sys.argv[3]})")
sys.exit(0 if d <= float(sys.argv[3]) else 1)
PYEOF
}
"$BIN/dptrain-ckpt" logits "$CK" --tokens "$ids" --out "$WORK/dptrain.npy" >/dev/null
$PY "$REF" logits "$WORK/hf" "$ids" "$WORK/torch.npy"
compare "$WORK/dptrain.npy" "$WORK/torch.npy" 1e-5 "float32 export"
"$BIN/dptrain-ckpt" export "$CK" --out "$WORK/hf16" --dtype bfloat16 >/dev/null
"$BIN/dptrain-ckpt" logits "$WORK/hf16" --tokens "$ids" --out "$WORK/dptrain16.npy" >/dev/null
$PY "$REF" logits "$WORK/hf16" "$ids" "$WORK/torch16.npy"
compare "$WORK/dptrain16.npy" "$WORK/torch16.npy" 1e-5 "bfloat16 export"
"$BIN/dptrain" eval --checkpoint "$CK" --data "$WORK/tok" --out "$WORK/eval.jsonl" >/dev/null || fail "dptrain eval failed"
ours=$(sed -n 's/.*"split":"val".*"loss":\([0-9.e+-]*\),.*/\1/p' "$WORK/eval.jsonl")
theirs=$($PY "$REF" val-loss "$WORK/hf" "$WORK/tok")
awk -v a="$ours" -v b="$theirs" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-4) }' \
  || fail "validation loss: dptrain $ours, PyTorch from the export $theirs (tolerance 1e-4)"
echo "ok: validation loss: dptrain $ours, PyTorch from the export $theirs"

# 1b. Import.
"$BIN/dptrain-ckpt" import "$WORK/hf" --out "$WORK/imported" >/dev/null || fail "dptrain-ckpt import of the export failed"
"$BIN/dptrain-ckpt" diff "$CK" "$WORK/imported/ckpt-00000080.h5" >"$WORK/diff.out" || true
grep -q "max abs diff: params 0," "$WORK/diff.out" || { cat "$WORK/diff.out"; fail "the imported export's parameters differ"; }
$PY "$REF" rewrite "$WORK/hf" "$WORK/hf-scaled"
"$BIN/dptrain-ckpt" logits "$WORK/hf-scaled" --tokens "$ids" --out "$WORK/dptrain-scaled.npy" >/dev/null \
  || fail "dptrain-ckpt logits could not read transformers' layout"
$PY "$REF" logits "$WORK/hf-scaled" "$ids" "$WORK/torch-scaled.npy"
compare "$WORK/dptrain-scaled.npy" "$WORK/torch-scaled.npy" 1e-5 "transformers' layout, Llama 3 rope scaling"
$PY -c 'import numpy as np, sys; sys.exit(0 if abs(np.load(sys.argv[1]) - np.load(sys.argv[2])).max() > 1e-3 else 1)' \
  "$WORK/torch-scaled.npy" "$WORK/torch.npy" || fail "the rope scaling left the logits as they were: not exercised"
train 2 "${L[@]}" --batch-size 8 --steps 5 --init-from "$WORK/hf" --run-dir "$WORK/ft"
[ "$RC" = 0 ] && grep -q "^weights from $WORK/hf$" "$WORK/out" || { cat "$WORK/out"; fail "--init-from: exit $RC"; }
ft=$(grep '"type":"step"' "$WORK/ft/metrics.jsonl" | head -n1 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
awk -v a="$ft" -v b="$last" -v f="$first" 'BEGIN { exit !(a < b + 0.3 && a < f - 0.5) }' \
  || fail "--init-from: the first loss $ft is not near the trained $last (a fresh run starts at $first)"
echo "ok: --init-from starts at loss $ft (trained $last, fresh $first)"
sed 's/"rope_type": "llama3"/"rope_type": "linear"/' "$WORK/hf-scaled/config.json" >"$WORK/cfg" && mv "$WORK/cfg" "$WORK/hf-scaled/config.json"
"$BIN/dptrain-ckpt" import "$WORK/hf-scaled" --out "$WORK/bad-import" >"$WORK/out" 2>&1 && fail "an unknown rope_scaling type was imported"
grep -q 'rope_scaling type "linear" is one dptrain.s Llama does not compute; it computes Llama 3.s ("llama3") or none' "$WORK/out" \
  || { cat "$WORK/out"; fail "an unknown rope_scaling type was not refused in one line"; }
train 1 "${L[@]}" --n-kv-head 2 --steps 2 --init-from "$WORK/hf" --run-dir "$WORK/bad-ft"
[ "$RC" = 2 ] && grep -q "the model has num_key_value_heads 1; this run has --n-kv-head 2: use --n-kv-head 1" "$WORK/out" \
  || { cat "$WORK/out"; fail "--init-from with another --n-kv-head: exit $RC, or not the one line naming it"; }
echo "ok: import round trip, transformers' layout with rope scaling, --init-from, and two refusals"

# 2. Exact resume.
resume() {  # NAME [options]
  local name=$1; shift
  train 2 "${L[@]}" --batch-size 4 --steps 40 --checkpoint-every 0 "$@" --run-dir "$WORK/straight-$name"
  [ "$RC" = 0 ] || { cat "$WORK/out"; fail "$name: straight run exited $RC"; }
  train 2 "${L[@]}" --batch-size 4 --steps 40 --checkpoint-every 0 "$@" --run-dir "$WORK/split-$name" --stop-after 20
  [ "$RC" = 0 ] || { cat "$WORK/out"; fail "$name: first half exited $RC"; }
  train 2 "${L[@]}" --batch-size 4 --steps 40 --checkpoint-every 0 "$@" --run-dir "$WORK/split-$name" --resume auto
  [ "$RC" = 0 ] && grep -q "resumed from .*ckpt-00000020.h5 at step 20" "$WORK/out" \
    || { cat "$WORK/out"; fail "$name: the resumed run exited $RC or did not resume at step 20"; }
  "$BIN/dptrain-ckpt" diff "$WORK/straight-$name/checkpoints/ckpt-00000040.h5" \
    "$WORK/split-$name/checkpoints/ckpt-00000040.h5" >/dev/null || fail "$name: resume is not bit-identical"
  echo "ok: $name: 20 + 20 steps resumed equal 40 straight, bit for bit"
}
resume plain
resume sharded-recompute-bf16-flash --shard-optimizer --recompute block --precision bf16 --attention flash

# 3. Accumulation.
train 1 "${L[@]}" --batch-size 8 --steps 50 --run-dir "$WORK/acc-1x8"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "1 rank x 8: exit $RC"; }
train 2 "${L[@]}" --batch-size 2 --grad-accum 2 --steps 50 --run-dir "$WORK/acc-2x2x2"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "2 ranks x 2 x 2: exit $RC"; }
"$BIN/dptrain-ckpt" diff "$WORK/acc-1x8/checkpoints/ckpt-00000050.h5" "$WORK/acc-2x2x2/checkpoints/ckpt-00000050.h5" \
  >"$WORK/diff.out" || true
p=$(sed -n 's/.*max abs diff: params \([0-9.e+-]*\),.*/\1/p' "$WORK/diff.out")
awk -v p="${p:-1}" 'BEGIN { exit !(p <= 1e-5) }' || { cat "$WORK/diff.out"; fail "accumulation: params differ by ${p:-?} > 1e-5"; }
echo "ok: 2 ranks x 2 windows x 2 micro-batches follow 1 rank x 8: params within $p after 50 steps"

# 4. Generation: the cache against the whole window, greedy, within the block of 32 (past it the
# cache keeps the newest half of a full window where recomputing slides it by one, as for a GPT).
"$BIN/dptrain" generate --checkpoint "$WORK/run" --prompt "The " --tokens 27 --temperature 0 >"$WORK/gen1.out" 2>/dev/null \
  || fail "generate failed"
"$BIN/dptrain" generate --checkpoint "$WORK/run" --prompt "The " --tokens 27 --temperature 0 --no-kv-cache \
  >"$WORK/gen2.out" 2>/dev/null || fail "generate --no-kv-cache failed"
cmp -s "$WORK/gen1.out" "$WORK/gen2.out" || { cat "$WORK/gen1.out" "$WORK/gen2.out"; fail "cached and recomputed texts differ"; }
[ "$(wc -c <"$WORK/gen1.out")" -gt 25 ] || fail "generate wrote too little: $(cat "$WORK/gen1.out")"
echo "ok: greedy text with the key/value cache equals recomputing the window: $(head -c 60 "$WORK/gen1.out" | tr '\n' ' ')"

# 4b. Serving: the completions API answers with generate's text.
"$BIN/dptrain" serve --checkpoint "$WORK/run" --port 0 >"$WORK/serve.out" 2>"$WORK/serve.err" &
SPID=$!
# (Killed and waited for quietly, whether it is still there or not: the trap runs under set -e.)
trap '{ kill -9 "$SPID" && wait "$SPID"; } 2>/dev/null || true; rm -rf "$WORK"' EXIT
URL=""
for _ in $(seq 100); do
  URL=$(sed -n 's/^serve: listening on \(http:[^ ]*\) .*/\1/p' "$WORK/serve.out" 2>/dev/null || true)
  [ -n "$URL" ] && break
  kill -0 "$SPID" 2>/dev/null || { cat "$WORK/serve.err"; fail "serve exited before listening"; }
  sleep 0.1
done
[ -n "$URL" ] || fail "serve did not listen within 10 s"
$PY - "$URL" "$WORK/gen1.out" <<'PYEOF' || fail "the served completion is not generate's text"
import json, sys, urllib.request
req = urllib.request.Request(sys.argv[1] + "/v1/completions", method="POST", headers={"Content-Type": "application/json"},
                             data=json.dumps({"prompt": "The ", "max_tokens": 27, "temperature": 0}).encode())
text = json.load(urllib.request.urlopen(req, timeout=30))["choices"][0]["text"]
want = open(sys.argv[2]).read().rstrip("\n")[len("The "):]
print(f"ok: serve's greedy completion equals generate's: {text!r}")
sys.exit(0 if text == want else 1)
PYEOF
kill "$SPID"; wait "$SPID" 2>/dev/null || true

# 5. Bad options.
train 1 "${L[@]}" --n-kv-head 3 --n-head 4 --steps 2 --run-dir "$WORK/bad"
[ "$RC" = 2 ] && grep -q "^dptrain: error: --n-kv-head 3 must divide --n-head 4" "$WORK/out" \
  || { cat "$WORK/out"; fail "--n-kv-head 3 of 4 heads: exit $RC, or not the one line that names it"; }
train 1 --model gpt --data "$WORK/tok" --n-kv-head 2 --rope-theta 500 --steps 2 --run-dir "$WORK/bad2"
grep -q "note: --n-kv-head 2, --rope-theta 500 are options of --model llama; the GPT leaves them unused" "$WORK/out" \
  || { cat "$WORK/out"; fail "Llama options on a GPT were not named as unused"; }
echo "ok: bad options named in one line"
