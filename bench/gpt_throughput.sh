#!/usr/bin/env bash
# GPT training throughput, dptrain beside PyTorch (bench/gpt_pytorch.py: the same model, optimizer,
# clipping and batch, data in memory), in one run, same thread counts:
#   small: 4 layers, 4 heads, C 128, T 64, batch 12 (the Tiny Shakespeare config), 1 and 2 threads,
#          and dptrain's 2 MPI ranks x 1 thread against 1 rank x 2 threads;
#   gpt2-shaped: C 768, 12 heads, T 256, 2 layers, batch 4 (a GPT-2-small layer stack, fewer layers).
#   bench/gpt_throughput.sh [SMALL_STEPS] [LARGE_STEPS]
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

# dptrain tokens/s: the mean of the step lines after the first (warm-up) one.
dp() {  # dp NP THREADS BATCH STEPS LOG L H C T
  local np=$1 th=$2 b=$3 steps=$4 log=$5 L=$6 H=$7 C=$8 T=$9
  # mpirun binds each rank to one core by default; a rank with several threads needs them all.
  local bind=""
  [ "$th" -gt 1 ] && bind="--bind-to none"
  $MPIRUN $bind -np "$np" build/dptrain --model gpt --data "$work/tok" --n-layer "$L" --n-head "$H" --n-embd "$C" \
    --block-size "$T" --batch-size "$b" --steps "$steps" --threads "$th" --log-every "$log" --eval-every 0 \
    --checkpoint-every 0 --run-dir "$work/run" --overwrite-checkpoints --step-timeout 0 >"$work/dp.out"
  grep '"type":"step"' "$work/run/metrics.jsonl" | tail -n +2 | sed 's/.*"tokens_per_s":\([0-9.e+]*\).*/\1/' |
    awk '{ s += $1; n++ } END { printf "%.0f", s / n }'
}
pt() {  # pt THREADS BATCH STEPS L H C T
  /usr/bin/python3 bench/gpt_pytorch.py --threads "$1" --batch "$2" --steps "$3" --layers "$4" --heads "$5" \
    --embd "$6" --block "$7" --vocab "$V" | sed -n 's/.*: \([0-9]*\) tokens\/s.*/\1/p'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
row() { printf '%-52s %10s %10s %7s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }

echo "# GPT tokens/s, dptrain vs PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), $(nproc) cores, vocabulary $V"
printf '%-52s %10s %10s %7s\n' "# configuration" "dptrain" "PyTorch" "ratio"
log=$((small_steps / 3))
row "small (L4 H4 C128 T64 B12), 1 thread" "$(dp 1 1 12 "$small_steps" "$log" 4 4 128 64)" "$(pt 1 12 "$small_steps" 4 4 128 64)"
row "small, 2 threads" "$(dp 1 2 12 "$small_steps" "$log" 4 4 128 64)" "$(pt 2 12 "$small_steps" 4 4 128 64)"
two_ranks=$(dp 2 1 6 "$small_steps" "$log" 4 4 128 64)
row "small, dptrain 2 ranks x 1 thread vs PyTorch 2 threads" "$two_ranks" "$(pt 2 12 "$small_steps" 4 4 128 64)"
log=$((large_steps / 2))
row "gpt2-shaped (L2 H12 C768 T256 B4), 1 thread" "$(dp 1 1 4 "$large_steps" "$log" 2 12 768 256)" "$(pt 1 4 "$large_steps" 2 12 768 256)"
row "gpt2-shaped, 2 threads" "$(dp 1 2 4 "$large_steps" "$log" 2 12 768 256)" "$(pt 2 4 "$large_steps" 2 12 768 256)"
