#!/usr/bin/env bash
# Generation speed: the key/value cache against recomputing the whole window for every token, for
# the Shakespeare GPT's shape (configs/gpt-shakespeare.ini: 4 layers, 4 heads, 128 wide) at block
# sizes 64 and 256, 64 and 256 new tokens after a 4-token prompt, greedy, one thread. The
# checkpoints are trained for 2 steps (the speed does not depend on the weights). Prints the
# tokens/s `dptrain generate` reports (the median of RUNS runs) and the ratio. Then a prompt's
# first call (prefill): a whole window of prompt and one new token, the cache's decode of the
# window against the training forward of it (--no-kv-cache), for that shape at block 256 and a
# GPT-2-shaped one (12 layers, 12 heads, 768 wide) at block 1024: seconds, median of RUNS. Last,
# that GPT-2-shaped model's decoding with fp32 and with bf16 weights (--precision), 1 and 2 threads.
#   bench/generate.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
build/dptrain-data text --input README.md --out "$work/tok" >/dev/null
rate() {  # rate CKPT TOKENS [GENERATE OPTIONS...]: the median tokens/s of $runs runs
  for _ in $(seq "$runs"); do
    build/dptrain generate --checkpoint "$1" --prompt "The " --tokens "$2" --temperature 0 "${@:3}" 2>&1 >/dev/null |
      sed -n 's/.*then \([0-9.]*\) tokens\/s.*/\1/p'
  done | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
printf '%-6s %-7s %14s %14s %7s\n' block tokens "cache tok/s" "recompute" ratio
for T in 64 256; do
  $MPIRUN -np 1 build/dptrain --config configs/gpt-shakespeare.ini --data "$work/tok" --block-size "$T" --steps 2 \
    --batch-size 2 --eval-every 0 --run-dir "$work/run-$T" >/dev/null
  for n in 64 256; do
    c=$(rate "$work/run-$T" "$n") r=$(rate "$work/run-$T" "$n" --no-kv-cache)
    printf '%-6d %-7d %14s %14s %6.1fx\n' "$T" "$n" "$c" "$r" "$(awk -v a="$c" -v b="$r" 'BEGIN { print a / b }')"
  done
done

# seconds CKPT PROMPT [--no-kv-cache]: the median seconds of $runs generations of one token
seconds() {
  for _ in $(seq "$runs"); do
    build/dptrain generate --checkpoint "$1" --prompt "$2" --tokens 1 --temperature 0 ${3:-} 2>&1 >/dev/null |
      sed -n 's/.* tokens in \([0-9.]*\) s:.*/\1/p'
  done | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
$MPIRUN -np 1 build/dptrain --config configs/gpt-shakespeare.ini --data "$work/tok" --block-size 1024 --n-layer 12 \
  --n-head 12 --n-embd 768 --steps 1 --batch-size 1 --eval-every 0 --run-dir "$work/run-gpt2" >/dev/null
printf '\n%-24s %14s %14s %15s\n' "prefill of a window" "cache s" "forward s" "forward/cache"
text=$(tr -d '\n' <README.md)
for row in 256:run-256:shakespeare 1024:run-gpt2:gpt2-shaped; do
  IFS=: read -r T dir name <<<"$row"
  c=$(seconds "$work/$dir" "${text:0:$T}") r=$(seconds "$work/$dir" "${text:0:$T}" --no-kv-cache)
  printf '%-24s %14s %14s %14.2fx\n' "$name, $T" "$c" "$r" "$(awk -v a="$c" -v b="$r" 'BEGIN { print b / a }')"
done

# Decoding a GPT-2-shaped model reads every weight for every token: fp32 weights against bf16 ones
# (--precision bf16, half the bytes), 100 tokens after a 4-token prompt, on 1 and 2 threads.
printf '\n%-24s %8s %14s %14s %7s\n' "decoding 100 tokens" threads "fp32 tok/s" "bf16 tok/s" ratio
for threads in 1 2; do
  f=$(rate "$work/run-gpt2" 100 --threads "$threads") h=$(rate "$work/run-gpt2" 100 --threads "$threads" --precision bf16)
  printf '%-24s %8d %14s %14s %6.2fx\n' "gpt2-shaped, 1024" "$threads" "$f" "$h" "$(awk -v a="$h" -v b="$f" 'BEGIN { print a / b }')"
done
