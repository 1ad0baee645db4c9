#!/usr/bin/env bash
# dptrain-data text --tokenizer bpe --tokenizer-json: a byte-level BPE as a Hugging Face
# tokenizer.json describes it (Llama 3's and Qwen2's form), against an independent encoder
# (tests/integration/hf_bpe_reference.py: Python and its regex module, sharing nothing with dptrain):
#   1. two tokenizer.json files trained by that script on generated text: Llama 3's form (its
#      pre-tokenizer pattern in a Split, merges as pairs, ignore_merges with whole words no merge
#      makes, special tokens after the vocabulary) and GPT-2's (a ByteLevel pre-tokenizer, merges as strings, <|endoftext|> inside
#      the vocabulary); every id equal to the reference's on that text and on random text full of
#      the pre-tokenizer's edge cases (contractions in any case, digit runs, CJK, emoji, Unicode
#      spaces, newlines, special tokens written into the text), the first text on 3 ranks
#   1b. Llama 3's post_processor (a TemplateProcessing putting <|begin_of_text|> before a sequence):
#      one text on 3 ranks begins with it once; two files are two documents, each wrapped and
#      ended by <|end_of_text|>
#   2. a Llama trains on those shards; its export carries a tokenizer.json, template included, that
#      encodes the text to the same ids (the reference reads it), and imports back with generate
#      working on it
#   3. a tokenizer.json dptrain does not compute as Hugging Face does gets one line naming the key
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
REF="$ROOT/tests/integration/hf_bpe_reference.py"
DATA="$BIN/dptrain-data"
$PY -c 'import regex, numpy, h5py' 2>/dev/null || fail "python3-regex, python3-numpy or python3-h5py is missing: run make test-deps"
"$PY" "$ROOT/tests/integration/make_text.py" 60000 >"$WORK/text.txt"
$PY - "$WORK" <<'PYEOF'
import random, sys
atoms = ["the", "The", "THE", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "'s", "'S", "'t", "'RE", "'ve", "'m", "'ll",
         "'D", "'", "don't", "I'M", "2024", "12345678", "3.14", "1,000", "x1", "é", "naïve", "Straße", "Ωμέγα",
         "привет", "日本語", "한국어", "🙂", "👍🏽", "👨‍👩‍👧", "e\u0301", "\u00a0", "\u3000", "\u2003", "²", "٣", "—",
         "…", "!!", "?", ".", ",", ";", "(", ")", "$", "#", "@", "\\", "/", "<|begin_of_text|>", "<|end_of_text|>",
         "<|endoftext|>", "<|begin_of", "word", " word", "\n word", " qwertyuiop", "qwertyuiop"]
r = random.Random(7)
with open(f"{sys.argv[1]}/random.txt", "w", encoding="utf-8", newline="") as f:
    f.write("".join(r.choice(atoms) for _ in range(20000)))
PYEOF

# same TOKENIZER TEXT SHARDS: the shards' ids (train then val) are the reference's for TEXT.
same() {
  $PY "$REF" encode "$1" "$2" "$WORK/ref.ids"
  same_ids "$WORK/ref.ids" "$3" "$2" || fail "ids differ from the reference's on $2 with $1"
}
# same_ids IDS SHARDS LABEL: the shards' ids (train then val) are IDS (uint32).
same_ids() {
  $PY - "$2" "$1" "$3" <<'PYEOF'
import glob, sys, h5py, numpy as np
files = sorted(glob.glob(f"{sys.argv[1]}/train-*.h5")) + sorted(glob.glob(f"{sys.argv[1]}/val-*.h5"))
ours = np.concatenate([h5py.File(f, "r")["tokens"][...] for f in files]).astype(np.int64)
theirs = np.fromfile(sys.argv[2], dtype=np.uint32).astype(np.int64)
n = min(len(ours), len(theirs))
bad = np.nonzero(ours[:n] != theirs[:n])[0]
if len(ours) != len(theirs) or len(bad):
    at = bad[0] if len(bad) else n
    print(f"{sys.argv[3]}: {len(ours)} ids against the reference's {len(theirs)}; first difference at {at}: "
          f"{ours[max(0, at - 3):at + 4]} against {theirs[max(0, at - 3):at + 4]}")
    sys.exit(1)
print(f"ok: {sys.argv[3].rsplit('/', 1)[-1]}: all {n} ids equal the reference's ({len(files)} shards)")
PYEOF
}

# 1. Both forms, both texts.
for form in llama3 gpt2; do
  $PY "$REF" make "$WORK/text.txt" "$WORK/$form.json" 400 "$form"
  i=0
  for t in "$WORK/text.txt" "$WORK/random.txt"; do
    i=$((i + 1))
    ranks=$([ $i = 1 ] && echo 3 || echo 1)
    $MPIRUN -np $ranks "$DATA" text --tokenizer bpe --tokenizer-json "$WORK/$form.json" --input "$t" \
      --out "$WORK/$form-tok$i" --shards 2 >"$WORK/t.out" 2>&1 || { cat "$WORK/t.out"; fail "$form: dptrain-data text failed on $t"; }
    same "$WORK/$form.json" "$t" "$WORK/$form-tok$i"
  done
done
grep -q "bpe vocabulary" "$WORK/t.out" || { cat "$WORK/t.out"; fail "dptrain-data does not name the bpe tokenizer"; }

# 1b. Llama 3's template: <|begin_of_text|> before each document.
$PY - "$WORK/llama3.json" "$WORK/bos.json" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))
bos = [a for a in t["added_tokens"] if a["content"] == "<|begin_of_text|>"][0]
name = bos["content"]
t["post_processor"] = {"type": "Sequence", "processors": [
    {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
    {"type": "TemplateProcessing",
     "single": [{"SpecialToken": {"id": name, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
     "pair": [{"SpecialToken": {"id": name, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
              {"SpecialToken": {"id": name, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
     "special_tokens": {name: {"id": name, "ids": [bos["id"]], "tokens": [name]}}}]}
json.dump(t, open(sys.argv[2], "w"))
PYEOF
$MPIRUN -np 3 "$DATA" text --tokenizer bpe --tokenizer-json "$WORK/bos.json" --input "$WORK/text.txt" \
  --out "$WORK/bos-tok1" --shards 2 >"$WORK/t.out" 2>&1 || { cat "$WORK/t.out"; fail "dptrain-data text failed with the template"; }
same "$WORK/bos.json" "$WORK/text.txt" "$WORK/bos-tok1"
head -c 20000 "$WORK/text.txt" >"$WORK/doc1.txt"
tail -c 20000 "$WORK/text.txt" >"$WORK/doc2.txt"
$MPIRUN -np 2 "$DATA" text --tokenizer bpe --tokenizer-json "$WORK/bos.json" --input "$WORK/doc1.txt" \
  --input "$WORK/doc2.txt" --out "$WORK/bos-tok2" --shards 2 >"$WORK/t.out" 2>&1 \
  || { cat "$WORK/t.out"; fail "dptrain-data text failed on two documents"; }
$PY "$REF" encode "$WORK/bos.json" "$WORK/doc1.txt" "$WORK/d1.ids"
$PY "$REF" encode "$WORK/bos.json" "$WORK/doc2.txt" "$WORK/d2.ids"
$PY - "$WORK" "$WORK/bos.json" <<'PYEOF'
import json, sys, numpy as np
eot = [a["id"] for a in json.load(open(sys.argv[2]))["added_tokens"] if a["content"] == "<|end_of_text|>"]
d = [np.fromfile(f"{sys.argv[1]}/d{i}.ids", dtype=np.uint32) for i in (1, 2)]
np.concatenate([d[0], np.array(eot, np.uint32), d[1], np.array(eot, np.uint32)]).tofile(f"{sys.argv[1]}/docs.ids")
PYEOF
same_ids "$WORK/docs.ids" "$WORK/bos-tok2" "two documents" || fail "two documents: not <|begin_of_text|> doc <|end_of_text|> each"
grep -q "begin_of_text" "$WORK/t.out" || { cat "$WORK/t.out"; fail "dptrain-data does not say what wraps each document"; }
echo "ok: <|begin_of_text|> before each document, as the reference puts it"

# 2. Train, export, import.
L=(--model llama --data "$WORK/bos-tok1" --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch-size 8
   --lr 3e-3 --warmup-steps 5 --eval-every 0 --log-every 20)
train 1 "${L[@]}" --steps 40 --run-dir "$WORK/run"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training on the bpe shards exited $RC"; }
"$BIN/dptrain-ckpt" export "$WORK/run" --out "$WORK/hf" >/dev/null || fail "export failed"
[ -f "$WORK/hf/tokenizer.json" ] && [ ! -e "$WORK/hf/vocab.json" ] || fail "the export has no tokenizer.json (or GPT-2's files)"
$PY "$REF" encode "$WORK/hf/tokenizer.json" "$WORK/random.txt" "$WORK/exported.ids"
$PY "$REF" encode "$WORK/bos.json" "$WORK/random.txt" "$WORK/given.ids"
cmp -s "$WORK/exported.ids" "$WORK/given.ids" || fail "the exported tokenizer.json encodes the text otherwise than the one given"
echo "ok: the export's tokenizer.json encodes as the one the shards were made with"
"$BIN/dptrain-ckpt" import "$WORK/hf" --out "$WORK/imported" >"$WORK/imp.out" || { cat "$WORK/imp.out"; fail "import failed"; }
grep -q "bpe tokenizer" "$WORK/imp.out" || { cat "$WORK/imp.out"; fail "import did not find the bpe tokenizer"; }
"$BIN/dptrain" generate --checkpoint "$WORK/imported" --prompt "The " --tokens 10 --temperature 0 >"$WORK/g1" 2>/dev/null \
  || fail "generate on the imported model failed"
"$BIN/dptrain" generate --checkpoint "$WORK/run" --prompt "The " --tokens 10 --temperature 0 >"$WORK/g2" 2>/dev/null
cmp -s "$WORK/g1" "$WORK/g2" || fail "the imported model generates otherwise than the trained one"
echo "ok: trained, exported with tokenizer.json, imported: $(head -c 40 "$WORK/g1" | tr '\n' ' ')"

# 3. Refusals, one line each.
refuse() {  # refuse NAME PYTHON_EDIT EXPECTED
  $PY - "$WORK/llama3.json" "$WORK/bad.json" "$2" <<'PYEOF'
import json, sys
t = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(t, open(sys.argv[2], "w"))
PYEOF
  set +e
  "$DATA" text --tokenizer bpe --tokenizer-json "$WORK/bad.json" --input "$WORK/text.txt" --out "$WORK/bad" >"$WORK/bad.out" 2>&1
  local rc=$?
  set -e
  [ "$rc" = 2 ] && [ "$(wc -l <"$WORK/bad.out")" = 1 ] && grep -q -- "$3" "$WORK/bad.out" \
    || { cat "$WORK/bad.out"; fail "$1: exit $rc, or not one line saying '$3'"; }
}
refuse normalizer 't["normalizer"] = {"type": "NFC"}' 'normalizer "NFC"'
refuse byte_fallback 't["model"]["byte_fallback"] = True' "model.byte_fallback is true"
refuse wordpiece 't["model"]["type"] = "WordPiece"' 'model.type is "WordPiece"'
refuse prefix 't["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True' "adds a prefix space"
refuse pattern 't["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"' "pre-tokenizer pattern does not compile"
refuse gap 't["added_tokens"][1]["id"] += 5' "added tokens must follow the vocabulary without gaps"
refuse roberta 't["post_processor"] = {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]}' \
  'post_processor "RobertaProcessing"'
refuse template 't["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<x>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {}}' \
  "names the special token"
echo "ok: eight tokenizer.json files refused in one line each"
