#!/usr/bin/env bash
# Sampling over a GPT-2-sized vocabulary (50,257 ids): `dptrain generate` of 300 tokens with the
# whole vocabulary (--top-k 0, the default of generate and of serve's requests), with --top-k 50
# and greedy (--temperature 0), for this build and, when given, a build before it beside it. The
# model is tiny (1 layer, 16 wide) so that the choice of each token, not the model, is what is
# timed; its ids are random, trained 2 steps (the speed does not depend on the weights). Prints the
# tokens/s generate reports, the median of RUNS runs.
#   bench/sampling.sh [RUNS] [BUILD_BEFORE]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
before=${2:-}
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 -c "
import numpy as np
np.random.default_rng(1).integers(0, 50257, 200000).astype(np.uint16).tofile('$work/ids.bin')"
build/dptrain-data tokens --input "$work/ids.bin" --format nanogpt --vocab-size 50257 --out "$work/tok" >/dev/null
$MPIRUN -np 1 build/dptrain --model gpt --data "$work/tok" --n-layer 1 --n-head 1 --n-embd 16 --block-size 64 \
  --steps 2 --batch-size 2 --eval-every 0 --run-dir "$work/run" >/dev/null
rate() {  # rate BUILD [GENERATE OPTIONS...]: the median tokens/s of $runs runs
  for _ in $(seq "$runs"); do
    "$1/dptrain" generate --checkpoint "$work/run" --prompt "1 2 3 4" --tokens 300 --seed 1 "${@:2}" 2>&1 >/dev/null |
      sed -n 's/.*then \([0-9.]*\) tokens\/s.*/\1/p'
  done | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}
printf '%-28s %12s %12s\n' sampling "this build" "${before:+before}"
for opts in "--temperature 0.8 --top-k 0" "--temperature 0.8 --top-k 50" "--temperature 0"; do
  # shellcheck disable=SC2086
  printf '%-28s %12s %12s\n' "$opts" "$(rate build $opts)" "$([ -z "$before" ] || rate "$before" $opts)"
done
