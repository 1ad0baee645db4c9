#!/usr/bin/env bash
# The language-model path end to end: text -> token shards -> GPT trained on 2 ranks (loss falls,
# validation runs, checkpoint) -> `dptrain generate` continues a prompt from the checkpoint;
# world-size independence for token windows (2 ranks x 4 = 1 rank x 8 within 1e-5); a resume is
# bit-identical. Uses Tiny Shakespeare when ../shared/data has it, else 150,000 characters of
# generated sentences (make_text.py: fixed, unlike the project's docs, whose every edit moved the
# losses compared here).
source "$(dirname "$0")/lib.bash"
text="$ROOT/../shared/data/tinyshakespeare.txt"
if [ ! -r "$text" ]; then
  echo "SKIPPED Tiny Shakespeare (../shared/data/tinyshakespeare.txt absent): training on generated sentences instead"
  /usr/bin/python3 "$ROOT/tests/integration/make_text.py" 150000 >"$WORK/generated.txt"
  text="$WORK/generated.txt"
fi
"$BIN/dptrain-data" text --input "$text" --out "$WORK/tok" --vocab char --shards 2 | tee "$WORK/data.out"
grep -q "char vocabulary of" "$WORK/data.out" || fail "dptrain-data text printed no summary"
G=(--model gpt --data "$WORK/tok" --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --lr 3e-3 --warmup-steps 10
   --eval-max 64 --log-every 50)
train 2 "${G[@]}" --batch-size 8 --steps 200 --eval-every 100 --run-dir "$WORK/run"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "GPT training exited $RC"; }
grep -q "tok/s | MFU" "$WORK/out" || { cat "$WORK/out"; fail "no tokens/s and MFU in the step line"; }
# MFU above 100% says why, once: here a --peak-gflops far below what a rank reaches.
train 1 "${G[@]}" --batch-size 8 --steps 100 --eval-every 0 --run-dir "$WORK/run-mfu" --peak-gflops 0.01
[ "$RC" = 0 ] && [ "$(grep -c "^warning: MFU [0-9]*% is above 100%: --peak-gflops 0.01 is below what each rank reaches$" "$WORK/out")" = 1 ] \
  || { cat "$WORK/out"; fail "MFU above 100%: want one warning naming --peak-gflops"; }
first=$(grep -m1 '"type":"step"' "$WORK/run/metrics.jsonl" | sed 's/.*"loss":\([0-9.e+-]*\).*/\1/')
v=$(jsonl_last "$WORK/run/metrics.jsonl" eval val_loss)
echo "train loss at step 50: $first; val loss at step 200: $v"
awk -v a="$first" -v b="$v" 'BEGIN { exit !(b < a - 0.3) }' || fail "validation loss $v did not fall below the early loss $first"
# Bits per byte: the validation loss per byte of the text predicted. Computed here from the val
# shard as the evaluator sees it (64 windows of 32 + 1 tokens, shift 0: targets 1..32 of each),
# for this ASCII text (a byte a token) and for one with 2-, 3- and 4-byte characters.
bpb_check() {  # bpb_check RUN_DIR DATA_DIR
  /usr/bin/python3 - "$1/metrics.jsonl" "$2/val-00000-of-00001.h5" <<'PY'
import json, math, sys, h5py
rec = [json.loads(l) for l in open(sys.argv[1]) if '"type":"eval"' in l][-1]
with h5py.File(sys.argv[2], "r") as f:
    ids = f["tokens"][...]
    vocab = f.attrs["vocab"]
    vocab = vocab.decode() if isinstance(vocab, bytes) else vocab
T, n = 32, min(64, (len(ids) - 32) // 32)
nbytes = sum(len(vocab[i].encode()) for w in range(n) for i in ids[w * T + 1:w * T + T + 1])
want = rec["val_loss"] * n * T / (nbytes * math.log(2))
got = rec["val_bits_per_byte"]
print(f"val loss {rec['val_loss']:.4f} nats over {n * T} tokens = {nbytes} bytes: {want:.4f} bits per byte; reported {got:.4f}")
sys.exit(0 if abs(got / want - 1) < 1e-4 else 1)
PY
}
bpb_check "$WORK/run" "$WORK/tok" || fail "bits per byte of the ASCII text"
/usr/bin/python3 -c 'import sys; t = open(sys.argv[1]).read(60000); print(t.replace("the", "thé").replace("rank", "ränk€").replace("step", "st𝑒p"))' \
  "$text" >"$WORK/wide.txt"
"$BIN/dptrain-data" text --input "$WORK/wide.txt" --out "$WORK/wide" --vocab char >/dev/null
train 1 "${G[@]}" --data "$WORK/wide" --batch-size 8 --steps 20 --eval-every 20 --run-dir "$WORK/run-wide"
[ "$RC" = 0 ] && grep -q "^eval at step 20 | .* samples | [0-9.]* bits per byte" "$WORK/out" \
  || { cat "$WORK/out"; fail "the multi-byte text: exit $RC, or no bits per byte in the eval line"; }
bpb_check "$WORK/run-wide" "$WORK/wide" || fail "bits per byte of a text with multi-byte characters"
echo "ok: bits per byte = loss x tokens / (bytes x ln 2), for 1- to 4-byte characters"
"$BIN/dptrain" generate --checkpoint "$WORK/run/checkpoints/ckpt-00000200.h5" --prompt "The " --tokens 40 \
  --temperature 0.8 --top-k 10 >"$WORK/gen.out" || fail "generate failed"
chars=$(wc -m <"$WORK/gen.out")
[ "$chars" -ge 44 ] || { cat "$WORK/gen.out"; fail "generate printed $chars characters, want the prompt + 40"; }
head -c 200 "$WORK/gen.out"; echo
# The run directory stands for its newest complete checkpoint: the same text, seed for seed.
"$BIN/dptrain" generate --checkpoint "$WORK/run" --prompt "The " --tokens 40 --temperature 0.8 --top-k 10 >"$WORK/gen2.out" \
  || fail "generate from the run directory failed"
cmp -s "$WORK/gen.out" "$WORK/gen2.out" || fail "generate --checkpoint RUN_DIR differs from its newest checkpoint"
# The key/value cache against recomputing the window: the same text up to the block size (32
# tokens: the prompt's 4 and 28 new ones), greedy and sampled (over the whole vocabulary and top-k:
# the decoder's decode_pick against the picker on the recomputed logits); past it both go on.
for sampling in "--temperature 0" "--temperature 0.8 --top-k 10" "--temperature 1.3"; do
  "$BIN/dptrain" generate --checkpoint "$WORK/run" --prompt "The " --tokens 28 $sampling >"$WORK/c.out" 2>"$WORK/c.err"
  "$BIN/dptrain" generate --checkpoint "$WORK/run" --prompt "The " --tokens 28 $sampling --no-kv-cache >"$WORK/r.out" 2>"$WORK/r.err"
  cmp -s "$WORK/c.out" "$WORK/r.out" || { cat "$WORK/c.out" "$WORK/r.out"; fail "generate $sampling: the cache's text differs"; }
  grep -q "^generate: 28 tokens in .* tokens/s (key/value cache, on the CPU, 1 thread)$" "$WORK/c.err" &&
    grep -q "^generate: 28 tokens in .* tokens/s (the whole window per token, on the CPU, 1 thread)$" "$WORK/r.err" \
    || { cat "$WORK/c.err" "$WORK/r.err"; fail "generate: no tokens/s line on stderr"; }
done
"$BIN/dptrain" generate --checkpoint "$WORK/run" --prompt "The " --tokens 100 --temperature 0 >"$WORK/long.out" 2>/dev/null
[ "$(wc -m <"$WORK/long.out")" -ge 104 ] || fail "generate past the block size printed $(wc -m <"$WORK/long.out") characters"
echo "ok: generate with the key/value cache writes the text of recomputing the window: $(head -c 60 "$WORK/c.out")"
mkdir -p "$WORK/empty"
"$BIN/dptrain" generate --checkpoint "$WORK/empty" >/dev/null 2>"$WORK/gen.err" && fail "a directory without checkpoints was accepted"
grep -q "^dptrain: error: --checkpoint .*empty: no complete checkpoint in" "$WORK/gen.err" || { cat "$WORK/gen.err"; fail "no clear line for an empty directory"; }
"$BIN/dptrain" generate --checkpoint "$WORK/run/checkpoints/ckpt-00000200.h5" --prompt "€" --tokens 5 >/dev/null 2>"$WORK/gen.err" \
  && fail "a prompt outside the vocabulary was accepted"
grep -q "not in the model's vocabulary" "$WORK/gen.err" || { cat "$WORK/gen.err"; fail "no clear message for an unknown character"; }
# --device and --precision: a bad value, and cuda where this machine has no GPU (or this build no
# CUDA), one line each, before any text; --device auto decodes on the CPU here and writes the
# CPU's text.
for bad in "--device tpu:--device 'tpu' is unknown" "--device cuda --no-kv-cache:--no-kv-cache recomputes on the CPU" \
  "--precision fp16:--precision 'fp16' is unknown; use fp32 or bf16" \
  "--precision bf16 --no-kv-cache:--no-kv-cache recomputes in fp32"; do
  "$BIN/dptrain" generate --checkpoint "$WORK/run" --tokens 5 ${bad%%:*} >"$WORK/gen.out" 2>"$WORK/gen.err" && fail "generate ${bad%%:*} was accepted"
  [ "$(wc -l <"$WORK/gen.err")" = 1 ] && grep -q -- "${bad#*:}" "$WORK/gen.err" || { cat "$WORK/gen.err"; fail "generate ${bad%%:*}: want one line naming it"; }
done
if "$BIN/dptrain" doctor 2>/dev/null | matches 'no GPU ('; then
  "$BIN/dptrain" generate --checkpoint "$WORK/run" --tokens 5 --device cuda >/dev/null 2>"$WORK/gen.err" && fail "--device cuda without a GPU was accepted"
  grep -q "^dptrain: error: --device cuda: .*use --device cpu" "$WORK/gen.err" || { cat "$WORK/gen.err"; fail "--device cuda without a GPU: no clear line"; }
  for d in cpu auto; do
    "$BIN/dptrain" generate --checkpoint "$WORK/run" --prompt "The " --tokens 28 --temperature 0 --device $d >"$WORK/$d.out" 2>"$WORK/$d.err"
  done
  grep -q "on the CPU" "$WORK/auto.err" && cmp -s "$WORK/auto.out" "$WORK/cpu.out" || { cat "$WORK/auto.err"; fail "--device auto without a GPU"; }
fi

# World-size independence and exact resume for token windows.
train 2 "${G[@]}" --batch-size 4 --steps 20 --eval-every 0 --run-dir "$WORK/w2"
train 1 "${G[@]}" --batch-size 8 --steps 20 --eval-every 0 --run-dir "$WORK/w1"
"$BIN/dptrain-ckpt" diff "$WORK/w2/checkpoints/ckpt-00000020.h5" "$WORK/w1/checkpoints/ckpt-00000020.h5" --tol 1e-5 \
  || fail "GPT: 2 ranks x 4 differs from 1 rank x 8"
# --recompute: the same run, bit for bit, keeping fewer activations.
for r in attention block; do
  train 2 "${G[@]}" --batch-size 4 --steps 20 --eval-every 0 --run-dir "$WORK/rc-$r" --recompute "$r"
  grep -q "^activations: .* MiB per rank with --recompute $r (.* MiB without recomputation)$" "$WORK/out" \
    || { cat "$WORK/out"; fail "--recompute $r: no activations line"; }
  "$BIN/dptrain-ckpt" diff "$WORK/w2/checkpoints/ckpt-00000020.h5" "$WORK/rc-$r/checkpoints/ckpt-00000020.h5" \
    || fail "--recompute $r: not bit-identical to keeping every activation"
done
train 2 "${G[@]}" --batch-size 4 --steps 20 --eval-every 0 --run-dir "$WORK/r" --stop-after 10
train 2 "${G[@]}" --batch-size 4 --steps 20 --eval-every 0 --run-dir "$WORK/r" --resume auto
"$BIN/dptrain-ckpt" diff "$WORK/w2/checkpoints/ckpt-00000020.h5" "$WORK/r/checkpoints/ckpt-00000020.h5" \
  || fail "GPT: resume is not bit-identical"
# The same text with one character swapped for another: a char table of the same size (so the same
# model shape) whose ids stand for other characters. A resume on it is refused (it trained on).
/usr/bin/python3 - "$text" "$WORK/swapped.txt" <<'PY'
import sys
t = open(sys.argv[1], encoding="utf-8").read()
top = max(set(t))
new = next(chr(c) for c in range(0x100, 0x200) if chr(c) not in t)
open(sys.argv[2], "w", encoding="utf-8").write(t.replace(top, new))
PY
"$BIN/dptrain-data" text --input "$WORK/swapped.txt" --out "$WORK/tok-swapped" --vocab char --shards 2 >/dev/null
train 2 "${G[@]}" --data "$WORK/tok-swapped" --batch-size 4 --steps 30 --eval-every 0 --run-dir "$WORK/r" --resume auto
[ "$RC" = 2 ] && grep -q "^dptrain: error: .*ckpt-00000020.h5: checkpoint was trained on char tokens, --data .*tok-swapped holds char tokens of another table: its ids would stand for other text; resume on data made with the checkpoint's tokenizer (its run had --data .*/tok)" "$WORK/out" \
  || { cat "$WORK/out"; fail "a resume on text of another char table: want exit 2 naming the tokenizer"; }
echo "ok: a resume on data of another char table is refused"

# like_fp32 DIR BANNER WHAT ARGS...: a 200-step run with ARGS says BANNER in its model line and
# trains as fp32 does (validation loss within 5% of the fp32 run's above).
like_fp32() {
  local dir=$1 banner=$2 what=$3 got
  shift 3
  train 2 "${G[@]}" --batch-size 8 --steps 200 --eval-every 100 --run-dir "$WORK/$dir" "$@"
  [ "$RC" = 0 ] || { cat "$WORK/out"; fail "$what: GPT training exited $RC"; }
  grep -q "$banner" "$WORK/out" || { cat "$WORK/out"; fail "$what: the run does not say '$banner'"; }
  got=$(jsonl_last "$WORK/$dir/metrics.jsonl" eval val_loss)
  echo "val loss at step 200: fp32 $v, $what $got"
  awk -v a="$v" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.05 * a) }' \
    || fail "$what: validation loss $got is not within 5% of fp32's $v"
}
# --precision bf16 (emulated on the CPU), and --attention flash (bf16 operands, key tiles with a
# running softmax: the CPU twin of the CUDA kernels).
like_fp32 bf16 "| bf16 matmuls |" bf16 --precision bf16
like_fp32 flash "| bf16 matmuls | flash attention |" "bf16 with flash attention" --precision bf16 --attention flash

# String attributes as h5py writes them by default (f.attrs["tokenizer"] = "char": variable-length
# UTF-8) are read like the fixed-length ones dptrain-data writes.
cp -r "$WORK/tok" "$WORK/tok-h5py"
/usr/bin/python3 - "$WORK"/tok-h5py/*.h5 <<'PY'
import sys, h5py
for path in sys.argv[1:]:
    with h5py.File(path, "r+") as f:
        for k in ("tokenizer", "vocab", "source"):
            if k in f.attrs:
                v = f.attrs[k]
                f.attrs[k] = v.decode() if isinstance(v, bytes) else str(v)
        assert h5py.check_string_dtype(f.attrs.get_id("tokenizer").dtype).length is None  # variable length
PY
train 1 "${G[@]}" --data "$WORK/tok-h5py" --batch-size 8 --steps 5 --eval-every 0 --run-dir "$WORK/run-h5py"
[ "$RC" = 0 ] && grep -q "^done: steps 1..5 " "$WORK/out" || { cat "$WORK/out"; fail "token shards with h5py's string attributes: exit $RC"; }
echo "ok: token shards whose string attributes h5py wrote (variable-length UTF-8) train"
# Big-endian ids (numpy's '>u2', contiguous; '>u4', chunked) train exactly as the native shards:
# they were read by pread as if native (a 'truncated' refusal, or wrong ids) or refused as not uint16.
cp -r "$WORK/tok" "$WORK/tok-be"
/usr/bin/python3 - "$WORK"/tok-be/*.h5 <<'PY'
import sys, h5py
for k, path in enumerate(sys.argv[1:]):
    with h5py.File(path, "r+") as f:
        t = f["tokens"][...]
        del f["tokens"]
        if k == 0: f.create_dataset("tokens", data=t.astype(">u2"))
        else: f.create_dataset("tokens", data=t.astype(">u4"), chunks=(4096,))
PY
train 1 "${G[@]}" --batch-size 8 --steps 5 --eval-every 5 --run-dir "$WORK/run-native"
train 1 "${G[@]}" --data "$WORK/tok-be" --batch-size 8 --steps 5 --eval-every 5 --run-dir "$WORK/run-be"
a=$(jsonl_last "$WORK/run-native/metrics.jsonl" eval val_loss) b=$(jsonl_last "$WORK/run-be/metrics.jsonl" eval val_loss)
[ "$RC" = 0 ] && [ -n "$a" ] && [ "$a" = "$b" ] || { cat "$WORK/out"; fail "big-endian token shards: exit $RC, val loss $b against the native shards' $a"; }
echo "ok: big-endian token shards (contiguous uint16, chunked uint32) train as the native ones: val loss $b"

# A token id outside the vocabulary (a shard written with another tokenizer) stops the run at
# start-up (every id is checked once per node before training) with one line naming the shard and
# the first bad offset, not an error deep in the model.
cp -r "$WORK/tok" "$WORK/tok-bad"
/usr/bin/python3 - "$WORK/tok-bad/train-00000-of-00002.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    t = f["tokens"][...]
    t[1000::500] = 60000
    f["tokens"][...] = t
PY
train 2 "${G[@]}" --data "$WORK/tok-bad" --batch-size 8 --steps 50 --eval-every 0 --run-dir "$WORK/run-bad"
[ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] && ! grep -q '^step' "$WORK/out" \
  && grep -q "^dptrain: error: .*tok-bad/train-00000-of-00002.h5: /tokens\[1000\] = 60000 is outside the char vocabulary of [0-9]* ids" "$WORK/out" \
  || { cat "$WORK/out"; fail "a token outside the vocabulary: want exit 2 at start-up and one line naming the shard and offset 1000"; }
echo "ok: $(grep '^dptrain: error:' "$WORK/out" | cut -c1-160)"
