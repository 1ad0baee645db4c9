#!/usr/bin/env bash
# The README's first command works: `make run` builds, makes the default dataset when missing,
# trains on 2 ranks with configs/local.ini and ends naming the metrics and the checkpoint.
source "$(dirname "$0")/lib.bash"
cd "$ROOT"
set +e
timeout -k 5 300 make --no-print-directory run >"$WORK/out" 2>&1
RC=$?
set -e
[ "$RC" = 0 ] || { tail -n 30 "$WORK/out"; fail "make run exited $RC"; }
grep -q "^eval at step 3000 " "$WORK/out" || { tail -n 30 "$WORK/out"; fail "no final evaluation"; }
grep -q "^checkpoint: runs/local/checkpoints/ckpt-00003000.h5" "$WORK/out" || fail "no final checkpoint line"
[ -f runs/local/checkpoints/ckpt-00003000.h5 ] || fail "checkpoint file missing"
"$BIN/dptrain-ckpt" info runs/local/checkpoints/ckpt-00003000.h5
grep '^done:' "$WORK/out"
# ... and ends by plotting the run.
for c in loss lr throughput phases; do
  grep -q "^dptrain-report: wrote runs/local/plots/$c.png" "$WORK/out" || { tail -n 12 "$WORK/out"; fail "make run did not plot $c"; }
  [ "$(head -c 8 "runs/local/plots/$c.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "runs/local/plots/$c.png is not a PNG"
done
echo "plots: runs/local/plots/{loss,lr,throughput,phases}.{png,svg}"
