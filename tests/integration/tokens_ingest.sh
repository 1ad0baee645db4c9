#!/usr/bin/env bash
# Data tokenized elsewhere: nanoGPT's train.bin/val.bin (raw uint16), llm.c's .bin (header and
# ids) and an HDF5 dataset of ids become token shards with tokenizer "ids" (dptrain-data tokens), a GPT trains on them on 2
# ranks, evaluates (no bits per byte: ids carry no text), resumes and generates ids from a prompt
# of ids; an id beyond the vocabulary, a truncated llm.c file and an odd-sized .bin are refused
# with one line naming the file.
source "$(dirname "$0")/lib.bash"
DATA="$BIN/dptrain-data"
/usr/bin/python3 - "$WORK" <<'PY'
import struct, sys
import numpy as np
w = sys.argv[1]
rng = np.random.default_rng(7)
# A learnable stream over GPT-2's 50257 ids: a repeating phrase of 16 ids with some noise.
phrase = rng.integers(0, 50257, 16)
def stream(n):
    ids = np.resize(phrase, n).copy()
    noise = rng.random(n) < 0.05
    ids[noise] = rng.integers(0, 50257, noise.sum())
    return ids.astype(np.uint16)
stream(40000).tofile(f"{w}/train.bin")   # nanoGPT's prepare.py: np.uint16 .tofile
stream(4000).tofile(f"{w}/val.bin")
ids = stream(8000)
header = np.zeros(256, dtype=np.int32)
header[:3] = (20240520, 1, len(ids))   # llm.c: magic, version 1 (uint16), count
with open(f"{w}/llmc_train.bin", "wb") as f:
    f.write(header.tobytes()); f.write(ids.tobytes())
with open(f"{w}/short.bin", "wb") as f:
    f.write(header.tobytes()); f.write(ids[:100].tobytes())
bad = stream(100); bad = bad.astype(np.uint16); bad[37] = 60000
bad.tofile(f"{w}/bad.bin")
PY
# The train split on 2 ranks (one shard each), checked against one rank's shards.
$MPIRUN -np 2 "$DATA" tokens --input "$WORK/train.bin" --vocab-size 50257 --split train --shards 2 --out "$WORK/tok" | tee "$WORK/t.out"
"$DATA" tokens --input "$WORK/train.bin" --vocab-size 50257 --split train --shards 2 --out "$WORK/tok1" >/dev/null
for f in train-00000-of-00002 train-00001-of-00002; do
  cmp -s <(h5dump -d /tokens "$WORK/tok/$f.h5" | tail -n +5) <(h5dump -d /tokens "$WORK/tok1/$f.h5" | tail -n +5) \
    || fail "tokens on 2 ranks: $f differs from one rank's"
done
"$DATA" tokens --input "$WORK/val.bin" --vocab-size 50257 --split val --out "$WORK/tok" | tee -a "$WORK/t.out"
grep -q "^dptrain-data tokens: 40000 ids (ids vocabulary 50257) from $WORK/train.bin (nanogpt) -> 40000 training ids in 2 shards, 0 validation ids" "$WORK/t.out" \
  && grep -q "4000 ids .* (nanogpt) -> 0 training ids in 0 shards, 4000 validation ids" "$WORK/t.out" \
  || fail "dptrain-data tokens: want the nanoGPT files as 2 train shards and a val shard"

G=(--model gpt --data "$WORK/tok" --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --lr 3e-3 --warmup-steps 10
   --eval-max 64 --log-every 50 --batch-size 8 --eval-every 100)
train 2 "${G[@]}" --steps 100 --stop-after 50 --run-dir "$WORK/run"
[ "$RC" = 0 ] && grep -q "^data $WORK/tok: 40000 training tokens in 2 shards .* ids vocabulary of 50257" "$WORK/out" \
  || { cat "$WORK/out"; fail "training on ids: exit $RC, or no banner naming the ids vocabulary"; }
train 2 "${G[@]}" --steps 100 --resume auto --run-dir "$WORK/run"
[ "$RC" = 0 ] && grep -q "^eval at step 100 | val loss [0-9.]* | .* samples$" "$WORK/out" \
  || { cat "$WORK/out"; fail "resumed training on ids: exit $RC, or an eval line with bits per byte (ids have no text)"; }
first=$(grep -m1 '"type":"step"' "$WORK/run/metrics.jsonl" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
v=$(jsonl_last "$WORK/run/metrics.jsonl" eval val_loss)
awk -v a="$first" -v b="$v" 'BEGIN { exit !(b < a - 1) }' || fail "the validation loss $v did not fall well below the first $first"
echo "ok: a GPT trained on nanoGPT's uint16 ids over 50257: loss $first -> val $v"
"$BIN/dptrain" generate --checkpoint "$WORK/run" --prompt "15496 11" --tokens 8 --temperature 0 >"$WORK/gen.out" \
  || fail "generate from ids failed"
grep -Eq "^15496 11( [0-9]+){8}$" "$WORK/gen.out" || { cat "$WORK/gen.out"; fail "generate: want the prompt's ids and 8 more"; }
echo "ok: generate -> $(cat "$WORK/gen.out")"
# A model whose vocabulary is padded past the tokenizer's (--vocab-size 128 over ids below 100)
# never draws the padding's ids: they decode to nothing (59 of 300 sampled ids were 100 or more).
/usr/bin/python3 -c "
import numpy as np
np.random.default_rng(2).integers(0, 100, 20000).astype(np.uint16).tofile('$WORK/ids100.bin')"
"$DATA" tokens --input "$WORK/ids100.bin" --format nanogpt --vocab-size 100 --out "$WORK/tok100" >/dev/null
train 1 --model gpt --data "$WORK/tok100" --vocab-size 128 --n-layer 1 --n-head 1 --n-embd 16 --block-size 16 --steps 2 \
  --batch-size 2 --eval-every 0 --run-dir "$WORK/run100"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training with a padded vocabulary exited $RC"; }
"$BIN/dptrain" generate --checkpoint "$WORK/run100" --prompt "1 2" --tokens 300 --temperature 1.5 --seed 3 >"$WORK/gen100.out"
padding=$(tr ' ' '\n' <"$WORK/gen100.out" | awk '$1 >= 100' | wc -l)
[ "$(wc -w <"$WORK/gen100.out")" = 302 ] && [ "$padding" = 0 ] \
  || { cat "$WORK/gen100.out"; fail "generate drew $padding ids of the padding (100..127)"; }
echo "ok: a padded vocabulary's ids are never drawn (300 sampled ids, all below 100)"
# Without --prompt (a new line, which a model of ids cannot read) generate says to give ids; it
# said "--prompt must not be empty" to a user who gave none.
set +e
"$BIN/dptrain" generate --checkpoint "$WORK/run100" --tokens 5 >/dev/null 2>"$WORK/gen.err"
rc=$?
set -e
[ "$rc" = 2 ] && [ "$(cat "$WORK/gen.err")" = 'dptrain: error: generate: this model reads ids: give the prompt as ids, --prompt "ID ID ..."' ] \
  || { cat "$WORK/gen.err"; fail "generate without --prompt on a model of ids: exit $rc"; }
echo "ok: $(cat "$WORK/gen.err")"
"$BIN/dptrain" generate --checkpoint "$WORK/run" --prompt "Hello" --tokens 4 >"$WORK/gen.out" 2>&1 \
  && fail "a text prompt to an ids model was accepted"
grep -q "'Hello' is not a token id in \[0, 50257)" "$WORK/gen.out" || { cat "$WORK/gen.out"; fail "no clear line for a text prompt"; }

"$DATA" tokens --input "$WORK/llmc_train.bin" --vocab-size 50257 --out "$WORK/llmc" >"$WORK/t.out"
grep -q "8000 ids .* (llmc) -> 7200 training ids in 1 shard, 800 validation ids" "$WORK/t.out" \
  || { cat "$WORK/t.out"; fail "llm.c's file: want 7200 train and 800 val ids"; }
echo "ok: $(cat "$WORK/t.out")"

# An HDF5 file of ids under a name of its own (h5py writes int64 by default).
/usr/bin/python3 -c 'import sys, h5py, numpy as np; h5py.File(sys.argv[1], "w")["data/ids"] = np.arange(3000) % 50257' "$WORK/ids.h5"
"$DATA" tokens --input "$WORK/ids.h5" --dataset /data/ids --vocab-size 50257 --out "$WORK/h5ids" >"$WORK/t.out"
grep -q "3000 ids .* (hdf5) -> 2700 training ids in 1 shard, 300 validation ids" "$WORK/t.out" \
  || { cat "$WORK/t.out"; fail "an HDF5 dataset of ids: want 2700 train and 300 val ids"; }
echo "ok: $(cat "$WORK/t.out")"

# refuse NAME PATTERN [dptrain-data tokens options]: exit 2, one error line
refuse() {
  local name=$1 pattern=$2; shift 2
  set +e; ${RANKS:+$MPIRUN -np $RANKS} "$DATA" tokens "$@" >"$WORK/t.out" 2>&1; local rc=$?; set -e
  [ "$rc" = 2 ] && [ "$(grep -c '^dptrain-data: error:' "$WORK/t.out")" = 1 ] && grep -q -- "$pattern" "$WORK/t.out" \
    || { cat "$WORK/t.out"; fail "$name: want exit 2 and one line matching '$pattern', got exit $rc"; }
  echo "ok: $name -> $(cat "$WORK/t.out")"
}
refuse "an id beyond the vocabulary" "bad.bin: token 37 is 60000, not below --vocab-size 50257" --input "$WORK/bad.bin" --vocab-size 50257 --out "$WORK/x"
RANKS=2 refuse "an id beyond the vocabulary, on 2 ranks" "bad.bin: token 37 is 60000, not below --vocab-size 50257" --input "$WORK/bad.bin" --vocab-size 50257 --out "$WORK/x"
refuse "a truncated llm.c file" "short.bin: the llm.c header says 8000 tokens of 2 bytes, but 200 bytes follow" --input "$WORK/short.bin" --vocab-size 50257 --out "$WORK/x"
refuse "no vocabulary size" "give the tokenizer's vocabulary size with --vocab-size" --input "$WORK/train.bin" --out "$WORK/x"
refuse "a directory as the input" "$WORK: a directory; give the token file (.bin, .npy or .h5) itself" --input "$WORK" --vocab-size 50257 --out "$WORK/x"
: >"$WORK/empty.bin"
refuse "an empty val file" "tokens: 0 ids in $WORK/empty.bin: too few for a validation split" --input "$WORK/empty.bin" --vocab-size 50257 --split val --out "$WORK/x"
refuse "shards already there" "already holds 2 shards" --input "$WORK/train.bin" --vocab-size 50257 --split train --shards 2 --out "$WORK/tok"
refuse "an HDF5 file without that dataset" "ids.h5: .*tokens.*--dataset NAME" --input "$WORK/ids.h5" --vocab-size 50257 --out "$WORK/x"

# dptrain-data text over many files: a directory (recursively, hidden files left out), a glob and a
# file, in sorted order, a newline added after a file that lacks one; the shards decode back to
# exactly that text.
mkdir -p "$WORK/corpus/b" "$WORK/corpus/.cache"
printf 'Alas, poor Yorick!\nI knew him' >"$WORK/corpus/b/2.txt"
printf 'To be, or not to be,\n' >"$WORK/corpus/b/1.txt"
printf 'not this: a hidden file\n' >"$WORK/corpus/.cache/x.txt"
printf 'that is the question.\n' >"$WORK/corpus/a.txt"
printf 'Horatio: a fellow of infinite jest.\n' >"$WORK/extra.md"
"$BIN/dptrain-data" text --input "$WORK/corpus" "$WORK/ext*.md" --out "$WORK/many" --val-fraction 0.25 >"$WORK/many.out"
grep -q "from 4 files: $WORK/corpus/a.txt ... $WORK/extra.md" "$WORK/many.out" || { cat "$WORK/many.out"; fail "text: want 4 files named"; }
/usr/bin/python3 - "$WORK/many" <<'PY' || fail "text over many files: the shards do not decode to the files' text"
import sys, h5py
d = sys.argv[1]
text = ""
for name in ("train-00000-of-00001.h5", "val-00000-of-00001.h5"):
    with h5py.File(f"{d}/{name}") as f:
        vocab = f.attrs["vocab"]
        vocab = vocab.decode() if isinstance(vocab, bytes) else vocab
        text += "".join(vocab[i] for i in f["tokens"][...])
want = ("that is the question.\n" "To be, or not to be,\n" "Alas, poor Yorick!\nI knew him\n"
        "Horatio: a fellow of infinite jest.\n")
assert text == want, repr(text)
print(f"ok: text over 4 files: {len(text)} characters, in order, a newline after the one without")
PY
set +e
"$BIN/dptrain-data" text --input "$WORK/corpus/*.none" --out "$WORK/none" 2>"$WORK/err"; rc=$?
set -e
[ "$rc" = 2 ] && grep -q "^dptrain-data: error: text: --input .*\*.none: no files there" "$WORK/err" \
  || { cat "$WORK/err"; fail "text: a pattern without files: want one line, exit 2"; }
# nanoGPT's two files converted with two vocabulary sizes: training names both sides and the fix
# (it said "regenerate them together", which two files converted in two runs cannot be).
"$DATA" tokens --input "$WORK/train.bin" --vocab-size 50257 --split train --out "$WORK/mixed" >/dev/null
"$DATA" tokens --input "$WORK/val.bin" --vocab-size 50304 --split val --out "$WORK/mixed" >/dev/null
train 1 "${G[@]}" --data "$WORK/mixed" --steps 2 --run-dir "$WORK/mixed-run"
[ "$RC" = 2 ] && grep -q "^dptrain: error: --data .*mixed: the train shards hold ids tokens of 50257 ids, the val shards ids tokens of 50304; make the val split again with the train split's settings" "$WORK/out" \
  || { cat "$WORK/out"; fail "train and val of two vocabularies: want one line naming both"; }
echo "ok: $(grep '^dptrain: error:' "$WORK/out" | cut -c1-160)"
