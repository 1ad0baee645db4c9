#!/usr/bin/env bash
# Data wait as a share of step time, from the step breakdown (docs/OBSERVABILITY.md): the MLP
# config (configs/local.ini) with --io direct and --io memory, and the GPT small config
# (configs/gpt-shakespeare.ini, 300 steps), at 1 and 2 ranks. Prints the whole run's share (the
# summary record: the first step, the warm-up, left out) and the last interval's (steady state).
#   bench/data_wait.sh
set -euo pipefail
cd "$(dirname "$0")/.."
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
text=../shared/data/tinyshakespeare.txt
if [ ! -r "$text" ]; then
  for _ in $(seq 40); do cat README.md docs/*.md; done >"$work/text.txt"
  text="$work/text.txt"
fi
build/dptrain-data text --input "$text" --out "$work/tok" >/dev/null
[ -f data/synth/val-00000-of-00001.h5 ] || build/dptrain-data synth --out data/synth >/dev/null

# share RUN_DIR: "whole-run% last-interval%" from the metrics file
share() {
  /usr/bin/python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
def pct(ph):
    total = sum(v["mean_ms"] for v in ph.values())
    return 100 * ph["data"]["mean_ms"] / total
summary = [r for r in recs if r["type"] == "summary"][-1]
last = [r for r in recs if r["type"] == "step"][-1]
print(f"{pct(summary['phases']):6.2f}% {pct(last['phases']):6.2f}%  ({summary['phases']['data']['mean_ms'] * 1000:.1f} us of "
      f"{sum(v['mean_ms'] for v in summary['phases'].values()):.3f} ms per step)")
PY
}
printf '%-28s %5s %8s %8s\n' config ranks whole last
for np in 1 2; do
  for io in direct memory; do
    $MPIRUN -np $np build/dptrain --config configs/local.ini --io $io --run-dir "$work/m" --overwrite-checkpoints \
      --progress plain >"$work/out" 2>&1
    printf '%-28s %5d %s\n' "mlp (local.ini) --io $io" $np "$(share "$work/m")"
  done
  $MPIRUN -np $np build/dptrain --config configs/gpt-shakespeare.ini --data "$work/tok" --steps 300 --eval-every 0 \
    --log-every 100 --run-dir "$work/g" --overwrite-checkpoints --progress plain >"$work/out" 2>&1
  printf '%-28s %5d %s\n' "gpt small (300 steps)" $np "$(share "$work/g")"
done
