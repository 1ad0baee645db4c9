#!/usr/bin/env bash
# Start-up cost: how long dptrain takes to start and end when it trains nothing, beside the floor
# of any MPI program (one that only calls MPI_Init and MPI_Finalize, built here with mpicc), and
# optionally beside another build of dptrain (before/after a change). Each row is the median of
# REPS wall times:
#   version      dptrain --version, no launcher (a singleton MPI process)
#   bad option   mpirun -np 2 dptrain --bach-size 3: both ranks start, refuse, end (exit 2); the
#                floor exits 2 too, since mpirun takes about 1 s more to end a job whose ranks
#                exit non-zero (odls_base_sigkill_timeout)
#   10 steps     mpirun -np 2, the MLP on a small synthetic set, 10 steps, no checkpoint
#   bench/startup.sh [REPS] [OTHER_BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-7}
other=${2:-}
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
printf '#include <mpi.h>\nint main(int c, char** v) { MPI_Init(&c, &v); MPI_Finalize(); return c > 1 ? 2 : 0; }\n' >"$work/floor.c"
mpicc -O2 "$work/floor.c" -o "$work/floor"
build/dptrain-data synth --out "$work/data" --train-samples 2048 --val-samples 64 >/dev/null

median() {  # median COMMAND...: the median wall seconds of REPS runs (the exit status is ignored)
  local i t
  for i in $(seq "$reps"); do
    /usr/bin/time -f %e -o "$work/t" "$@" >/dev/null 2>&1 || true
    tail -n1 "$work/t"
  done | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", v[int((NR + 1) / 2)] }'
}
row() {  # row WHAT BIN_DIR
  local b=$2
  printf '%-26s %8s %11s %9s\n' "$1" "$(median "$b/dptrain" --version)" \
    "$(median $MPIRUN -np 2 "$b/dptrain" --bach-size 3)" \
    "$(median $MPIRUN -np 2 "$b/dptrain" --data "$work/data" --steps 10 --batch-size 8 --eval-every 0 \
        --checkpoint-every 0 --run-dir "$work/run" --overwrite-checkpoints)"
}
echo "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; median of $reps (s)"
printf '%-26s %8s %11s %9s\n' "" version "bad option" "10 steps"
printf '%-26s %8s %11s %9s\n' "MPI_Init + MPI_Finalize" "$(median "$work/floor")" "$(median $MPIRUN -np 2 "$work/floor" fail)" \
  "$(median $MPIRUN -np 2 "$work/floor")"
row "dptrain (build)" build
[ -z "$other" ] || row "dptrain ($other)" "$other"
