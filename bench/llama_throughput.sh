#!/usr/bin/env bash
# Llama training throughput on the CPU, in one run: dptrain's Llama beside dptrain's GPT at the same
# parameter count and tokens (the goal: a Llama step within 1.2x of the GPT step), and beside
# PyTorch's same Llama (bench/gpt_pytorch.py --arch llama: the same model, AdamW, clipping, batch,
# data in memory), at the same thread counts:
#   small: 4 layers, 4 heads, C 128, T 64, batch 12; SwiGLU width 341 (3 x 341 ~ 8 x 128: the GPT's
#          4C MLP's parameters), key/value heads 4 (as many as the GPT's) and 1 (grouped-query);
#   gpt2-shaped: 2 layers, 12 heads, C 768, T 256, batch 4, SwiGLU width 2048 (= 8C/3).
#   bench/llama_throughput.sh [SMALL_STEPS] [LARGE_STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
small_steps=${1:-60}
large_steps=${2:-8}
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
text=../shared/data/tinyshakespeare.txt
if [ ! -r "$text" ]; then  # any text will do for speed: the project's docs, repeated
  for _ in $(seq 40); do cat README.md docs/*.md; done >"$work/text.txt"
  text="$work/text.txt"
fi
build/dptrain-data text --input "$text" --out "$work/tok" >/dev/null
V=$(h5dump -a /vocab_size "$work/tok/val-00000-of-00001.h5" | sed -n 's/.*(0): \([0-9]*\).*/\1/p')

# dptrain tokens/s: the mean of the step lines after the first (warm-up) one; the parameter count
# from the banner into $work/params.
dp() {  # dp THREADS BATCH STEPS L H C T MODEL [options]
  local th=$1 b=$2 steps=$3 L=$4 H=$5 C=$6 T=$7 model=$8
  shift 8
  local bind=""
  [ "$th" -gt 1 ] && bind="--bind-to none"
  $MPIRUN $bind -np 1 build/dptrain --model "$model" --data "$work/tok" --n-layer "$L" --n-head "$H" --n-embd "$C" \
    --block-size "$T" --batch-size "$b" --steps "$steps" --threads "$th" --log-every $((steps / 3)) --eval-every 0 \
    --checkpoint-every 0 --run-dir "$work/run" --overwrite-checkpoints --step-timeout 0 "$@" >"$work/dp.out"
  sed -n 's/^model .*: \([0-9]*\) parameters.*/\1/p' "$work/dp.out" >"$work/params"
  grep '"type":"step"' "$work/run/metrics.jsonl" | tail -n +2 | sed 's/.*"tokens_per_s":\([0-9.e+]*\).*/\1/' |
    awk '{ s += $1; n++ } END { printf "%.0f", s / n }'
}
pt() {  # pt THREADS BATCH STEPS L H C T KV FFN
  /usr/bin/python3 bench/gpt_pytorch.py --arch llama --threads "$1" --batch "$2" --steps "$3" --layers "$4" \
    --heads "$5" --embd "$6" --block "$7" --kv-heads "$8" --ffn "$9" --vocab "$V" | sed -n 's/.*: \([0-9]*\) tokens\/s.*/\1/p'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

echo "# tokens/s on $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), vocabulary $V"
printf '%-40s %9s %9s %9s %9s %10s %10s %10s\n' "# configuration" "GPT" "Llama" "GPT/Llama" "PyTorch" "ours/PyT" \
  "GPT params" "Llama params"
row() {  # row NAME THREADS BATCH STEPS L H C T KV FFN
  local name=$1 th=$2 b=$3 steps=$4 L=$5 H=$6 C=$7 T=$8 kv=$9 ffn=${10}
  local g l p gp lp
  g=$(dp "$th" "$b" "$steps" "$L" "$H" "$C" "$T" gpt); gp=$(cat "$work/params")
  l=$(dp "$th" "$b" "$steps" "$L" "$H" "$C" "$T" llama --n-kv-head "$kv" --ffn-hidden "$ffn"); lp=$(cat "$work/params")
  p=$(pt "$th" "$b" "$steps" "$L" "$H" "$C" "$T" "$kv" "$ffn")
  printf '%-40s %9s %9s %9s %9s %10s %10s %10s\n' "$name" "$g" "$l" "$(ratio "$g" "$l")" "$p" "$(ratio "$l" "$p")" "$gp" "$lp"
}
row "small KV4, 1 thread" 1 12 "$small_steps" 4 4 128 64 4 341
row "small KV4, 2 threads" 2 12 "$small_steps" 4 4 128 64 4 341
row "small KV1, 1 thread" 1 12 "$small_steps" 4 4 128 64 1 341
row "gpt2-shaped KV12, 1 thread" 1 4 "$large_steps" 2 12 768 256 12 2048
row "gpt2-shaped KV12, 2 threads" 2 4 "$large_steps" 2 12 768 256 12 2048
