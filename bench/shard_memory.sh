#!/usr/bin/env bash
# A rank's memory against the number of shards it reads: the MLP of configs/local.ini on the
# synthetic set (131,072 rows) cut into SHARDS files, 1 rank, with 1 and 4 reader threads
# (--io-threads). For each row: the plan's total (the start-up table) and the measured peak
# resident memory (the run's last lines). Given another build (before/after a change), runs it
# beside this one on the same files.
#   bench/shard_memory.sh [OTHER_BUILD_DIR] [SHARDS...]
set -euo pipefail
cd "$(dirname "$0")/.."
other=${1:-}
shift || true
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(4 64 256 1024)
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
builds=(build)
[ -n "$other" ] && builds+=("$other")
printf '%-28s %7s %8s %10s %10s\n' build shards readers "plan MiB" "peak MiB"
for n in "${counts[@]}"; do
  build/dptrain-data synth --out "$work/d$n" --shards "$n" >/dev/null
  for readers in 1 4; do
    for b in "${builds[@]}"; do
      dir="$work/run-$RANDOM"
      "$b/dptrain" --config configs/local.ini --data "$work/d$n" --steps 200 --log-every 100 --eval-every 0 \
        --checkpoint-every 0 --threads 1 --io-threads "$readers" --run-dir "$dir" >"$dir.out" 2>&1 ||
        { cat "$dir.out"; exit 1; }
      printf '%-28s %7s %8s %10s %10s\n' "$b" "$n" "$readers" \
        "$(sed -n 's/^  total (rank 0)  *\([0-9.]*\) MiB.*/\1/p' "$dir.out")" \
        "$(sed -n 's/^memory: peak resident \([0-9.]*\) MiB.*/\1/p' "$dir.out")"
      rm -rf "$dir" "$dir.out"
    done
  done
done
