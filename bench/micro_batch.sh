#!/usr/bin/env bash
# What a step of small micro-batches costs beyond its arithmetic: the MLP of configs/local.ini
# with 128 samples per rank and step, as one batch and as --grad-accum 4 micro-batches of 32, on
# 1 rank with 1 compute thread and on 2 ranks (one core each). Prints the median ms per step over
# ROUNDS runs (each the mean of its step lines after the first interval) and the ratio 32x4 / 128.
# Given another build (before/after a change), runs both in turn, round by round, so that both
# see the same machine. Then the floor: the step's matrix products alone, whole and in 4
# micro-batches, as dptrain's ops and as bare OpenBLAS calls (dptrain-bench products, 1 thread).
#   bench/micro_batch.sh [ROUNDS] [OTHER_BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
other=${2:-}
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
build/dptrain-data synth --out "$work/data" >/dev/null

run() {  # run BIN_DIR RANKS THREADS BATCH ACCUM: ms per step of one run
  local out=$work/run-$RANDOM
  $MPIRUN -np "$2" "$1/dptrain" --config configs/local.ini --data "$work/data" --eval-every 0 --checkpoint-every 0 \
    --steps 3000 --log-every 500 --threads "$3" --batch-size "$4" --grad-accum "$5" --run-dir "$out" >/dev/null
  grep '"type":"step"' "$out/metrics.jsonl" | tail -n +2 | sed 's/.*"ms_per_step":\([0-9.e+-]*\).*/\1/' |
    awk '{ s += $1; n++ } END { printf "%.4f\n", s / n }'
  rm -rf "$out"
}
median() { sort -g | awk '{ v[NR] = $1 } END { printf "%.3f", v[int((NR + 1) / 2)] }'; }

builds=(build)
[ -n "$other" ] && builds+=("$other")
printf '%-28s %-7s %10s %10s %7s\n' build ranks "128 ms" "32x4 ms" ratio
for ranks in 1 2; do
  threads=$([ $ranks = 1 ] && echo 1 || echo 0)
  for r in $(seq "$rounds"); do
    for b in "${builds[@]}"; do
      key=$(echo "$b" | tr / _)
      run "$b" $ranks $threads 128 1 >>"$work/$key-$ranks-128"
      run "$b" $ranks $threads 32 4 >>"$work/$key-$ranks-32"
    done
  done
  for b in "${builds[@]}"; do
    key=$(echo "$b" | tr / _)
    one=$(median <"$work/$key-$ranks-128") four=$(median <"$work/$key-$ranks-32")
    printf '%-28s %-7s %10s %10s %7s\n' "$b" $ranks "$one" "$four" "$(awk -v a="$four" -v b="$one" 'BEGIN { printf "%.3f", a / b }')"
  done
done
echo
build/dptrain-bench products --dims 32,256,256,10 --rows 128 --micro-batches 4 --threads 1
