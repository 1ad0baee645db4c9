#!/usr/bin/env bash
# Step time of the MLP on 1 rank and on 2 ranks (same per-rank batch, one compute thread per
# rank), with the gradient all-reduce after backward or overlapped with it, and, as the hardware
# baseline, two independent 1-rank jobs side by side (what 2 ranks cost without communicating).
#   bench/step_scaling.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-4000}
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
build/dptrain-data synth --out "$work/data" >/dev/null
common=(--data "$work/data" --steps "$steps" --batch-size 64 --threads 1 --log-every 500 --eval-every 0 --checkpoint-every 0)

# Mean ms/step and exposed / total comm % over the step lines after the first interval.
summary() {
  grep '"type":"step"' "$1" | tail -n +2 | sed 's/.*"ms_per_step":\([0-9.e+-]*\).*"comm_exposed_pct":\([0-9.e+-]*\),"comm_total_pct":\([0-9.e+-]*\).*/\1 \2 \3/' |
    awk '{ m += $1; e += $2; t += $3; n++ } END { printf "%.3f %.1f %.1f", m / n, e / n, t / n }'
}
row() {  # row LABEL RUNDIR
  read -r ms exp tot <<<"$(summary "$2/metrics.jsonl")"
  printf '%-44s %9s %10s %9s\n' "$1" "$ms" "$exp" "$tot"
}
printf '%-44s %9s %10s %9s\n' "# configuration" "ms/step" "exposed%" "comm%"
$MPIRUN -np 1 build/dptrain "${common[@]}" --run-dir "$work/one" >/dev/null
row "1 rank" "$work/one"
build/dptrain "${common[@]}" --run-dir "$work/solo1" >/dev/null & build/dptrain "${common[@]}" --run-dir "$work/solo2" >/dev/null
wait
row "2 independent 1-rank jobs at once (each)" "$work/solo1"
for cfg in "off 4" "on 4" "on 0.05"; do
  set -- $cfg
  $MPIRUN -np 2 build/dptrain "${common[@]}" --overlap "$1" --bucket-mb "$2" --run-dir "$work/two-$1-$2" >/dev/null
  row "2 ranks, hierarchical, overlap $1, bucket $2 MiB" "$work/two-$1-$2"
done
$MPIRUN -np 2 build/dptrain "${common[@]}" --overlap off --allreduce flat --run-dir "$work/flat" >/dev/null
row "2 ranks, flat (MPI_Allreduce), overlap off" "$work/flat"
