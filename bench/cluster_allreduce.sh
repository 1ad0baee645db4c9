#!/usr/bin/env bash
# All-reduce across emulated nodes (tests/cluster/up) with shaped links: 2 nodes x 2 ranks and
# 4 nodes x 1, every algorithm beside MPI_Allreduce (dptrain-bench allreduce), at RATE per link.
# Needs root and iproute2; `make bench-cluster` runs it. Results: docs/BENCHMARKS.md.
#   bench/cluster_allreduce.sh [RATE]        (default 100mbit)
set -euo pipefail
cd "$(dirname "$0")/.."
rate=${1:-100mbit}
export DPT_CLUSTER_DIR=$(mktemp -d /tmp/dptrain-bench-cluster-XXXXXX)
trap 'tests/cluster/down --prefix dptb >/dev/null 2>&1; rm -rf "$DPT_CLUSTER_DIR"' EXIT
for shape in "2 2" "4 1"; do
  set -- $shape
  tests/cluster/up "$1" --slots "$2" --rate "$rate" --prefix dptb
  echo "# $1 nodes x $2 ranks, links shaped to $rate"
  timeout -k 5 600 mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root ) \
    $(cat "$DPT_CLUSTER_DIR/mpirun.args") -np 4 build/dptrain-bench allreduce -b 1M -e 4M -f 4 -n 3 -w 1 \
    | grep -v '^# dptrain-bench'
  tests/cluster/down --prefix dptb >/dev/null
done
