#!/usr/bin/env bash
# Step time on chunked + gzip shards (h5py's compression="gzip") against the same rows stored
# contiguous, with --io direct and --io memory: an MLP of 64 features, 20,000 training rows (one
# 5 MB shard, inside the chunk cache's budget), batch 256 on 2 ranks, 200 steps. Prints the mean
# step and the data share of the step breakdown (the summary record: the first step left out).
#   bench/chunked_shards.sh [OTHER_BUILD_DIR]   # a second build (the one before a change) beside this one
set -euo pipefail
cd "$(dirname "$0")/.."
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
work=$(mktemp -d /tmp/dptrain-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 - "$work" <<'PY'
import os, sys, h5py, numpy as np
r = np.random.default_rng(0)
for kind in ("contiguous", "gzip"):
    os.makedirs(f"{sys.argv[1]}/{kind}")
for split, n in (("train", 20000), ("val", 500)):
    x = r.standard_normal((n, 64)).astype("f4")
    y = (np.arange(n) % 10).astype("i4")
    for kind in ("contiguous", "gzip"):
        with h5py.File(f"{sys.argv[1]}/{kind}/{split}-00000-of-00001.h5", "w") as f:
            extra = {"compression": "gzip"} if kind == "gzip" else {}
            f.create_dataset("features", data=x, **extra)
            f.create_dataset("labels", data=y, **extra)
            f.attrs["num_classes"] = 10
PY
echo "build | shards | --io | step ms | data %"
for build in build "$@"; do
  for kind in contiguous gzip; do
    for io in direct memory; do
      run="$work/run-$kind-$io"
      rm -rf "$run"
      $MPIRUN -np 2 "$build/dptrain" --data "$work/$kind" --io "$io" --steps 200 --batch-size 256 --hidden 256,256 \
        --eval-every 0 --log-every 200 --checkpoint-every 0 --run-dir "$run" >/dev/null
      /usr/bin/python3 - "$run/metrics.jsonl" "$build" "$kind" "$io" <<'PY'
import json, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"summary"' in l][-1]["phases"]
total = sum(v["mean_ms"] for v in s.values())
print(f"{sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {total:.2f} | {100 * s['data']['mean_ms'] / total:.1f}")
PY
    done
  done
done
