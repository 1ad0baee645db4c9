#!/usr/bin/env bash
# The sentencepiece tokenizer end to end: dptrain-data text on 2 ranks (rank 0 trains a BPE of 512
# pieces on the training text and sends it; each rank encodes half); Python's sentencepiece (python3-sentencepiece), given the model the shard carries,
# encodes the whole text to the same ids and decodes them back to it; a GPT trains on the shards
# (bits per byte from the pieces' bytes as Python sees them), generates text, and exports the
# model as tokenizer.model, which --sp-model takes back; bad options and files get one line.
# Uses Tiny Shakespeare when ../shared/data has it, else generated sentences.
source "$(dirname "$0")/lib.bash"
DATA="$BIN/dptrain-data"
/usr/bin/python3 -c 'import sentencepiece' 2>/dev/null || {
  echo "SKIPPED sentencepiece: Python's sentencepiece is missing (python3-sentencepiece, installed by make test-deps)"
  exit 0
}
text="$ROOT/../shared/data/tinyshakespeare.txt"
if [ ! -r "$text" ]; then
  echo "SKIPPED Tiny Shakespeare (../shared/data/tinyshakespeare.txt absent): generated sentences instead"
  /usr/bin/python3 "$ROOT/tests/integration/make_text.py" 300000 >"$WORK/generated.txt"
  text="$WORK/generated.txt"
fi
$MPIRUN -np 2 "$DATA" text --input "$text" --out "$WORK/tok" --tokenizer sentencepiece --vocab-size 512 | tee "$WORK/t.out"
grep -q "(sentencepiece vocabulary of 512) .* (2 ranks)$" "$WORK/t.out" || fail "dptrain-data text --tokenizer sentencepiece: no summary"
/usr/bin/python3 - "$WORK/tok" "$text" <<'PY' || fail "Python's sentencepiece disagrees with the shards"
import sys, h5py, numpy as np, sentencepiece as spm
d, path = sys.argv[1:]
parts = [h5py.File(f"{d}/{n}", "r") for n in ("train-00000-of-00001.h5", "val-00000-of-00001.h5")]
assert all(p.attrs["tokenizer"] in (b"sentencepiece", "sentencepiece") for p in parts)
model = bytes(parts[0]["vocab"][...])
assert model == bytes(parts[1]["vocab"][...]), "the two shards carry different models"
sp = spm.SentencePieceProcessor(model_proto=model)
text = open(path, encoding="utf-8").read()
ids = sp.encode(text)
ours = np.concatenate([p["tokens"][...] for p in parts])
assert sp.get_piece_size() == 512 and len(ids) == len(ours) and (np.array(ids) == ours).all(), "ids"
assert sp.decode(ours.tolist()) == text, "decode"
print(f"ok: Python's sentencepiece encodes the text to the shards' {len(ids)} ids and decodes them back")
PY

G=(--model gpt --data "$WORK/tok" --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --lr 3e-3 --warmup-steps 2
   --eval-max 32 --log-every 10 --batch-size 8)
train 1 "${G[@]}" --steps 20 --eval-every 20 --run-dir "$WORK/run"
[ "$RC" = 0 ] && grep -q "^eval at step 20 | .* [0-9.]* bits per byte" "$WORK/out" \
  || { cat "$WORK/out"; fail "training on sentencepiece shards: exit $RC, or no bits per byte"; }
/usr/bin/python3 - "$WORK/run/metrics.jsonl" "$WORK/tok/val-00000-of-00001.h5" <<'PY' || fail "bits per byte of the sentencepiece tokens"
import json, math, sys, h5py, sentencepiece as spm
rec = [json.loads(l) for l in open(sys.argv[1]) if '"type":"eval"' in l][-1]
with h5py.File(sys.argv[2], "r") as f:
    ids, model = f["tokens"][...], bytes(f["vocab"][...])
sp = spm.SentencePieceProcessor(model_proto=model)
def nbytes(i):  # what a piece stands for in the text
    if sp.is_byte(i): return 1
    if sp.is_control(i) or sp.is_unknown(i): return 0
    return len(sp.id_to_piece(i).replace("\u2581", " ").encode())
T, n = 32, min(32, (len(ids) - 32) // 32)
total = sum(nbytes(int(i)) for w in range(n) for i in ids[w * T + 1:w * T + T + 1])
want = rec["val_loss"] * n * T / (total * math.log(2))
print(f"sentencepiece: val loss {rec['val_loss']:.4f} over {n * T} tokens = {total} bytes: {want:.4f} bits per byte; reported {rec['val_bits_per_byte']:.4f}")
sys.exit(0 if abs(rec["val_bits_per_byte"] / want - 1) < 1e-4 else 1)
PY
"$BIN/dptrain" generate --checkpoint "$WORK/run" --prompt "The king" --tokens 6 --temperature 0 >"$WORK/gen.out" \
  || fail "generate from a sentencepiece checkpoint failed"
grep -q "^The king" "$WORK/gen.out" || { cat "$WORK/gen.out"; fail "generate: the prompt does not come back as text"; }
echo "ok: generate -> $(head -c 120 "$WORK/gen.out" | tr '\n' ' ')"

"$BIN/dptrain-ckpt" export "$WORK/run/checkpoints/ckpt-00000020.h5" --out "$WORK/hf" >/dev/null || fail "export failed"
/usr/bin/python3 -c 'import sys, h5py; sys.exit(open(sys.argv[1], "rb").read() != bytes(h5py.File(sys.argv[2], "r")["vocab"][...]))' \
  "$WORK/hf/tokenizer.model" "$WORK/tok/val-00000-of-00001.h5" || fail "export: tokenizer.model is not the shards' model"
"$DATA" text --input "$text" --out "$WORK/again" --tokenizer sentencepiece --sp-model "$WORK/hf/tokenizer.model" >/dev/null
cmp -s <(h5dump -d /tokens "$WORK/tok/val-00000-of-00001.h5" | tail -n +5) <(h5dump -d /tokens "$WORK/again/val-00000-of-00001.h5" | tail -n +5) \
  || fail "--sp-model with the exported model gave other ids"
echo "ok: export writes tokenizer.model; --sp-model reads it back to the same ids"

# The character tokenizer on 3 ranks gives the shards of one.
"$DATA" text --input "$text" --out "$WORK/c1" --shards 2 >/dev/null
$MPIRUN -np 3 "$DATA" text --input "$text" --out "$WORK/c3" --shards 2 >/dev/null
for f in train-00000-of-00002 train-00001-of-00002 val-00000-of-00001; do
  cmp -s <(h5dump -d /tokens "$WORK/c1/$f.h5" | tail -n +5) <(h5dump -d /tokens "$WORK/c3/$f.h5" | tail -n +5) \
    || fail "char on 3 ranks: $f differs from one rank's"
done
echo "ok: dptrain-data text on 3 ranks writes the shards one rank writes"

# A user's model as spm_train makes it by default (NFKC normalization, a dummy prefix before the
# text, extra spaces removed): --sp-model must give exactly Python's ids for the whole text.
/usr/bin/python3 - "$text" "$WORK/user.model" <<'PY'
import sys, sentencepiece as spm
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
with open(sys.argv[2], "wb") as out:
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, vocab_size=400, minloglevel=2,
                                   hard_vocab_limit=False)  # the generated fallback text holds fewer pieces
PY
"$DATA" text --input "$text" --out "$WORK/user" --tokenizer sentencepiece --sp-model "$WORK/user.model" >/dev/null
/usr/bin/python3 - "$WORK/user" "$text" "$WORK/user.model" <<'PY' || fail "--sp-model with a default spm_train model: ids differ from Python's"
import sys, h5py, numpy as np, sentencepiece as spm
d, path, model = sys.argv[1:]
ours = np.concatenate([h5py.File(f"{d}/{n}", "r")["tokens"][...] for n in ("train-00000-of-00001.h5", "val-00000-of-00001.h5")])
theirs = spm.SentencePieceProcessor(model_file=model).encode(open(path, encoding="utf-8").read())
assert len(ours) == len(theirs) and (ours == np.array(theirs)).all(), (len(ours), len(theirs))
print(f"ok: a default spm_train model (dummy prefix, NFKC): the same {len(theirs)} ids as Python's sentencepiece")
PY

bad() {  # bad WANT ARGS...: dptrain-data text ARGS must exit 2 with one line containing WANT
  local want=$1; shift
  set +e; "$DATA" text --out "$WORK/bad" --overwrite "$@" >"$WORK/bad.out" 2>&1; local rc=$?; set -e
  [ "$rc" = 2 ] && grep -qF -- "$want" "$WORK/bad.out" && [ "$(grep -c . "$WORK/bad.out")" = 1 ] \
    || { cat "$WORK/bad.out"; fail "want exit 2 and one line with '$want', got exit $rc"; }
}
bad "--vocab-size 100: a SentencePiece model trained here needs 260" --input "$text" --tokenizer sentencepiece --vocab-size 100
bad "--sp-type 'wordpiece' is unknown" --input "$text" --tokenizer sentencepiece --vocab-size 512 --sp-type wordpiece
bad "--sp-model $WORK/hf/config.json: not a SentencePiece model" --input "$text" --tokenizer sentencepiece --sp-model "$WORK/hf/config.json"
bad "--sp-model and --vocab-size belong to --tokenizer sentencepiece" --input "$text" --tokenizer char --vocab-size 512
printf 'caf\xc3' >"$WORK/bad.txt"
bad "text: --input $WORK/bad.txt: not UTF-8 at line 1 (byte 3 of the file: 0xC3)" --input "$WORK/bad.txt" --tokenizer sentencepiece --vocab-size 300
# In a folder of files, the file itself is named, and the line (its offset in the joined text was).
mkdir -p "$WORK/corpus" && printf 'one\ntwo\n' >"$WORK/corpus/a.txt" && printf 'ok\ncaf\xe9\n' >"$WORK/corpus/b.txt"
bad "text: --input $WORK/corpus/b.txt: not UTF-8 at line 2 (byte 6 of the file: 0xE9)" --input "$WORK/corpus" --tokenizer char
echo "ok: bad sentencepiece options and files each get one line"
