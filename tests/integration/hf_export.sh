#!/usr/bin/env bash
# Models out and in, against an independent reader (tests/integration/hf_reference.py: PyTorch
# from Debian's python3-torch, its own safetensors reader and writer, GPT-2 from torch primitives):
#   1. a trained GPT exported as float32 gives PyTorch the logits dptrain computes (within 1e-5),
#      and the file follows the format's layout; exported as bfloat16, half the bytes and the same
#      logits on both sides from the rounded weights
#   2. weights written the way PyTorch's GPT2LMHeadModel saves them (names under "transformer.",
#      tied lm_head, mask buffers, a longer position table) import: dptrain's logits equal
#      PyTorch's, and --init-from starts a 2-rank run at the trained model's loss, not a fresh
#      one's; a requeued run resumes from its own checkpoint instead of importing again
#   3. each bad case gets one line naming it and exit 2 (a config.json or tokenizer that does not
#      fit, an export over a directory that holds files, a diff of two models of one size)
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
REF="$ROOT/tests/integration/hf_reference.py"
$PY -c 'import torch' 2>/dev/null || fail "python3-torch is missing: run make test-deps"

"$PY" "$ROOT/tests/integration/make_text.py" 60000 >"$WORK/text.txt"
"$BIN/dptrain-data" text --input "$WORK/text.txt" --out "$WORK/tok" --vocab char >/dev/null
G=(--model gpt --data "$WORK/tok" --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch-size 8 --lr 3e-3
   --warmup-steps 10 --eval-every 0 --log-every 1)
train 1 "${G[@]}" --steps 150 --run-dir "$WORK/run"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training exited $RC"; }
trained=$(grep '"type":"step"' "$WORK/run/metrics.jsonl" | tail -n 20 | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/' |
  awk '{ s += $1 } END { printf "%.4f", s / NR }')
CK="$WORK/run/checkpoints/ckpt-00000150.h5"
"$BIN/dptrain-ckpt" export "$CK" --out "$WORK/hf" >/dev/null
V=$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' "$WORK/hf/config.json")
ids=$($PY -c "import random; random.seed(3); print(','.join(str(random.randrange($V)) for _ in range(32)))")

# compare A.npy B.npy TOL WHAT
compare() {
  $PY - "$@" <<'PY' || fail "$4: logits differ"
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert a.shape == b.shape, f"shapes {a.shape} vs {b.shape}"
d = float(np.abs(a - b).max())
print(f"{sys.argv[4]}: {a.shape[0]} positions x {a.shape[1]} logits, max |dptrain - PyTorch| = {d:.2e} (tolerance {sys.argv[3]})")
sys.exit(0 if d <= float(sys.argv[3]) else 1)
PY
}

# 1. Export, float32 and bfloat16.
"$BIN/dptrain-ckpt" logits "$CK" --tokens "$ids" --out "$WORK/dptrain.npy" >/dev/null
$PY "$REF" check-layout "$WORK/hf/model.safetensors"
$PY "$REF" logits "$WORK/hf" "$ids" "$WORK/torch.npy"
compare "$WORK/dptrain.npy" "$WORK/torch.npy" 1e-5 "float32 export"
"$BIN/dptrain-ckpt" export "$CK" --out "$WORK/hf16" --dtype bfloat16 >/dev/null
$PY "$REF" check-layout "$WORK/hf16/model.safetensors"
s32=$(stat -c %s "$WORK/hf/model.safetensors") s16=$(stat -c %s "$WORK/hf16/model.safetensors")
[ $((s16 * 2)) -lt $((s32 + 4096)) ] && [ $((s16 * 2)) -gt $((s32 - 4096)) ] \
  || fail "bfloat16 export is $s16 bytes, float32 $s32: want half"
grep -q '"torch_dtype": "bfloat16"' "$WORK/hf16/config.json" || fail "config.json of the bf16 export names no bfloat16"
"$BIN/dptrain-ckpt" logits "$WORK/hf16" --tokens "$ids" --out "$WORK/dptrain16.npy" >/dev/null
$PY "$REF" logits "$WORK/hf16" "$ids" "$WORK/torch16.npy"
compare "$WORK/dptrain16.npy" "$WORK/torch16.npy" 1e-5 "bfloat16 export"

# 1b. dptrain-ckpt import: the export back as a checkpoint is bit-identical in its parameters and
# generates the same text; PyTorch-written weights (its GPT2LMHeadModel layout) import too, their
# logits PyTorch's; a directory without a tokenizer, and an import over checkpoints, are refused.
"$BIN/dptrain-ckpt" import "$WORK/hf" --out "$WORK/imported" >"$WORK/imp.out"
grep -q "^$WORK/hf: gpt .*, char tokenizer -> $WORK/imported/ckpt-00000150.h5 (step 150, no optimizer state)$" \
  "$WORK/imp.out" || { cat "$WORK/imp.out"; fail "import: no line naming the checkpoint written"; }
"$BIN/dptrain-ckpt" diff --params-only "$CK" "$WORK/imported" >"$WORK/diff.out" \
  || { cat "$WORK/diff.out"; fail "export -> import: the parameters are not bit-identical"; }
"$BIN/dptrain" generate --checkpoint "$CK" --prompt "the " --tokens 40 --temperature 0 2>/dev/null >"$WORK/gen-a"
"$BIN/dptrain" generate --checkpoint "$WORK/imported" --prompt "the " --tokens 40 --temperature 0 2>/dev/null >"$WORK/gen-b"
cmp -s "$WORK/gen-a" "$WORK/gen-b" || fail "the imported checkpoint generates other text"
"$BIN/dptrain-ckpt" info "$WORK/imported" | grep -q "step 150 | imported: no optimizer state" || fail "info of an import"
set +e
"$BIN/dptrain-ckpt" import "$WORK/hf" --out "$WORK/imported" 2>"$WORK/err"; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "already holds checkpoints; choose another directory or pass --overwrite" "$WORK/err" \
  || { cat "$WORK/err"; fail "import over checkpoints: want exit 2 and one line"; }
mkdir -p "$WORK/notok" && cp "$WORK/hf/model.safetensors" "$WORK/notok/"
$PY -c 'import json, sys; c = json.load(open(sys.argv[1])); del c["dptrain"]; json.dump(c, open(sys.argv[2], "w"))' \
  "$WORK/hf/config.json" "$WORK/notok/config.json"
set +e
"$BIN/dptrain-ckpt" import "$WORK/notok" --out "$WORK/imp2" 2>"$WORK/err"; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "no tokenizer beside the weights" "$WORK/err" || { cat "$WORK/err"; fail "import without a tokenizer"; }
echo "ok: export -> import is bit-identical and generates the same text; refusals named"

# 2. PyTorch-written weights in, 64 positions for a 32-token run (cropped).
mkdir -p "$WORK/pt"
$PY "$REF" rewrite "$WORK/hf" "$WORK/pt" 64
"$BIN/dptrain-ckpt" logits "$WORK/pt" --tokens "$ids" --out "$WORK/dptrain-pt.npy" >/dev/null
$PY "$REF" logits "$WORK/pt" "$ids" "$WORK/torch-pt.npy"
compare "$WORK/dptrain-pt.npy" "$WORK/torch-pt.npy" 1e-5 "GPT2LMHeadModel-style file"
# With the tokenizer named (the rewrite leaves dptrain's entry out of config.json).
$PY -c 'import json, sys; c = json.load(open(sys.argv[2])); c["dptrain"] = json.load(open(sys.argv[1]))["dptrain"]
json.dump(c, open(sys.argv[2], "w"))' "$WORK/hf/config.json" "$WORK/pt/config.json"
"$BIN/dptrain-ckpt" import "$WORK/pt" --out "$WORK/pt-ck" >/dev/null
"$BIN/dptrain-ckpt" logits "$WORK/pt-ck" --tokens "$ids" --out "$WORK/dptrain-ptck.npy" >/dev/null
compare "$WORK/dptrain-ptck.npy" "$WORK/torch-pt.npy" 1e-5 "GPT2LMHeadModel-style file imported as a checkpoint"
train 2 "${G[@]}" --batch-size 4 --steps 20 --run-dir "$WORK/ft" --resume auto --init-from "$WORK/pt"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "--init-from run exited $RC"; }
grep -q "^weights from $WORK/pt (position table cropped from 64 to --block-size 32)$" "$WORK/out" \
  || { cat "$WORK/out"; fail "no banner line naming the imported weights and the crop"; }
train 1 "${G[@]}" --steps 1 --run-dir "$WORK/fresh"
first_ft=$(grep -m1 '"type":"step"' "$WORK/ft/metrics.jsonl" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
first_fresh=$(grep -m1 '"type":"step"' "$WORK/fresh/metrics.jsonl" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
echo "first step's loss: imported $first_ft, trained model's last 20 steps $trained, random init $first_fresh"
awk -v a="$first_ft" -v t="$trained" -v f="$first_fresh" 'BEGIN { exit !(a < t + 0.25 && a < f - 0.5) }' \
  || fail "the imported run's first loss $first_ft is not the trained model's ($trained)"
train 2 "${G[@]}" --batch-size 4 --steps 30 --run-dir "$WORK/ft" --resume auto --init-from "$WORK/pt"
[ "$RC" = 0 ] && grep -q "^resumed from .*ckpt-00000020.h5 at step 20" "$WORK/out" && ! grep -q "^weights from" "$WORK/out" \
  || { cat "$WORK/out"; fail "a requeued --init-from run must resume from its checkpoint, not import again"; }
echo "ok: --init-from trains on from the imported weights; a requeue resumes from its checkpoint"

# 3. Bad cases: one line each, exit 2.
bad() {  # bad WHAT PATTERN dptrain-args...
  local what=$1 pattern=$2; shift 2
  refused 1 "${G[@]}" --steps 2 --run-dir "$WORK/bad" --overwrite-checkpoints "$@"
  [ "$RC" = 2 ] && grep -q -- "$pattern" "$WORK/out" || { cat "$WORK/out"; fail "$what: want exit 2 and '$pattern'"; }
}
bad "layers" "the model has 2 layers; this run has --n-layer 3" --init-from "$WORK/pt" --n-layer 3
bad "heads" "the model has n_head 2; this run has --n-head 4" --init-from "$WORK/pt" --n-head 4
bad "positions" "the model has 64 positions; --block-size 128 needs as many" --init-from "$WORK/pt" --block-size 128
bad "vocabulary" "the model's vocabulary is $V (wte $V x 32), this run's is 300" --init-from "$WORK/pt" --vocab-size 300
bad "no such path" "$WORK/nothing: no such file or directory" --init-from "$WORK/nothing"
head -c 5000 "$WORK/hf/model.safetensors" >"$WORK/short.safetensors"
bad "truncated file" "short.safetensors: tensor '.*'s data_offsets .* are outside" --init-from "$WORK/short.safetensors"
mkdir -p "$WORK/empty"
bad "no weights in the directory" "no model.safetensors in the directory" --init-from "$WORK/empty"
set +e
"$BIN/dptrain-ckpt" export "$WORK/nothing.h5" --out "$WORK/x" 2>"$WORK/err"; rc=$?
set -e
[ "$rc" = 2 ] && [ "$(wc -l <"$WORK/err")" = 1 ] || { cat "$WORK/err"; fail "export of a missing checkpoint: want one line, exit 2"; }
# Text of another char table (one character swapped for one the text lacks): the same vocabulary
# size, so the same shapes; the ids would stand for other characters (it trained on).
$PY - "$WORK/text.txt" "$WORK/swapped.txt" <<'EOF2'
import sys
t = open(sys.argv[1], encoding="utf-8").read()
new = next(chr(c) for c in range(0x100, 0x200) if chr(c) not in t)
open(sys.argv[2], "w", encoding="utf-8").write(t.replace(max(set(t)), new))
EOF2
"$BIN/dptrain-data" text --input "$WORK/swapped.txt" --out "$WORK/tok-swapped" --vocab char >/dev/null
bad "another char table" "init-from .*/hf/model.safetensors: the model was trained on char tokens, the run's data holds char tokens of another table" \
  --init-from "$WORK/hf" --data "$WORK/tok-swapped"
# An export into a directory that holds files (a user's model, another export) is refused; with
# --overwrite another tokenizer's files there are removed. A run directory stands for its newest
# checkpoint.
mkdir -p "$WORK/theirs" && echo '{}' >"$WORK/theirs/config.json" && echo '{}' >"$WORK/theirs/vocab.json"
set +e
"$BIN/dptrain-ckpt" export "$WORK/run" --out "$WORK/theirs" >"$WORK/exp.out" 2>"$WORK/err"; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "^dptrain-ckpt: error: --out .*/theirs already holds 2 files (config.json, vocab.json); export into a new directory, or replace the model there with --overwrite" "$WORK/err" \
  && [ "$(cat "$WORK/theirs/config.json")" = "{}" ] || { cat "$WORK/err"; fail "export over a directory that holds files"; }
"$BIN/dptrain-ckpt" export "$WORK/run" --out "$WORK/theirs" --overwrite >"$WORK/exp.out"
grep -q "^removed .*/theirs/vocab.json: another tokenizer's file" "$WORK/exp.out" && [ ! -e "$WORK/theirs/vocab.json" ] \
  && grep -q "^.*run/checkpoints/ckpt-00000150.h5: step 150" "$WORK/exp.out" || { cat "$WORK/exp.out"; fail "export --overwrite"; }
cmp "$WORK/theirs/model.safetensors" "$WORK/hf/model.safetensors" || fail "the run directory's export is not its newest checkpoint's"
# Two models of one size (another --n-head): diff says they differ, whatever --tol.
train 1 "${G[@]}" --steps 2 --n-head 4 --run-dir "$WORK/heads4"
set +e
"$BIN/dptrain-ckpt" diff "$WORK/run" "$WORK/heads4" --tol 100 >"$WORK/diff.out"; rc=$?
set -e
[ "$rc" = 1 ] && grep -q "^different models: gpt .* H=2 C=32 vs gpt .* H=4 C=32" "$WORK/diff.out" \
  || { cat "$WORK/diff.out"; fail "diff of two models of one size: want exit 1, 'different models'"; }
refused 1 --model mlp --data "$WORK/tok" --steps 2 --run-dir "$WORK/bad" --init-from "$WORK/pt"
[ "$RC" = 2 ] && grep -q "init-from reads GPT-2 or Llama weights; it is for --model gpt or llama" "$WORK/out" || { cat "$WORK/out"; fail "--init-from with the MLP"; }
echo "ok: every bad case named in one line"
