#!/usr/bin/env bash
# Which tokenizer learns Tiny Shakespeare best for the same compute: the character model against
# SentencePiece BPEs of VOCAB pieces (trained on the training text), each trained for SECONDS of
# wall time on 2 ranks with configs/gpt-shakespeare.ini (4 layers, 128 wide, block 64, 12
# windows a step). A 30-step run measures each one's ms/step; the real run then takes the steps
# that fit SECONDS (its learning-rate schedule scaled to them) and evaluates once at the end on
# all its validation windows (the last 10% of its tokens: nearly the same text for every
# tokenizer, which bits per byte makes comparable). Prints steps, ms/step, wall seconds,
# validation loss per token and bits per byte.
#   bench/tokenizer_bpb.sh [SECONDS] [VOCAB ...]      defaults: 200 1024 4096
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-200}; [ $# -gt 0 ] && shift
vocabs=("$@"); [ ${#vocabs[@]} -gt 0 ] || vocabs=(1024 4096)
text=../shared/data/tinyshakespeare.txt
[ -r "$text" ] || text=data/tinyshakespeare.txt
[ -r "$text" ] || { echo "bench/tokenizer_bpb.sh: no Tiny Shakespeare; run data/get-tinyshakespeare.sh" >&2; exit 2; }
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
ms() { grep '"type":"step"' "$1/metrics.jsonl" | tail -n +2 | sed 's/.*"ms_per_step":\([0-9.e+-]*\).*/\1/' |
  awk '{ s += $1; n++ } END { printf "%.2f", s / n }'; }
last() { grep '"type":"eval"' "$1/metrics.jsonl" | tail -n1 | sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p"; }
printf '%-22s %6s %8s %8s %9s %14s\n' tokenizer steps ms/step wall-s "val loss" "bits per byte"
for v in char "${vocabs[@]}"; do
  if [ "$v" = char ]; then build/dptrain-data text --input "$text" --out "$work/$v" >/dev/null; name="char (65)"
  else build/dptrain-data text --input "$text" --out "$work/$v" --tokenizer sentencepiece --vocab-size "$v" >/dev/null
       name="sentencepiece BPE $v"; fi
  G=(--config configs/gpt-shakespeare.ini --data "$work/$v" --checkpoint-every 0)
  $MPIRUN -np 2 build/dptrain "${G[@]}" --steps 31 --log-every 10 --eval-every 0 --run-dir "$work/cal-$v" >/dev/null
  steps=$(awk -v s="$seconds" -v m="$(ms "$work/cal-$v")" 'BEGIN { printf "%d", s * 1000 / m }')
  t0=$(date +%s.%N)
  $MPIRUN -np 2 build/dptrain "${G[@]}" --steps "$steps" --warmup-steps $((steps / 20)) --log-every $((steps / 10)) \
    --eval-every "$steps" --eval-max 0 --run-dir "$work/run-$v" >/dev/null
  wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
  printf '%-22s %6d %8s %8s %9s %14s\n' "$name" "$steps" "$(ms "$work/run-$v")" "$wall" "$(last "$work/run-$v" val_loss)" \
    "$(last "$work/run-$v" val_bits_per_byte)"
done
